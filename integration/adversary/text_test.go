package adversary

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Finding 6 of issue 38: text from nodes and plugins reached operators'
// terminals raw, an external ID reached plugins unchecked, and
// /v1/agent/self showed the fence command to anyone.

// hostileText sets the terminal's title, clears the screen and paints
// what follows red; then an 8-bit CSI, a bidi override and a carriage
// return that would overwrite the line.
const hostileText = "\x1b]0;pwned\x07\x1b[2J\x1b[31mALL NODES DOWN\u009b0m\u202eexe.\rX"

// terminalControls lists what a terminal acts on, for the messages.
var terminalControls = []string{"\x1b", "\x07", "\r", "\u009b", "\u202e"}

// rawControl is the first raw terminal control in s, quoted, or "".
func rawControl(s string) string {
	for _, c := range terminalControls {
		if strings.Contains(s, c) {
			return fmt.Sprintf("%q", c)
		}
	}
	return ""
}

// hostileNode is a node as an attacker's agent would register it: its
// plugin's health description, provider and fence errors carry terminal
// escapes.
func hostileNode(id, name string) *structs.Node {
	return &structs.Node{ID: id, Name: name, SecretID: "secret-" + id + "-" + structs.NewSecret()[:8], Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
			HealthDescription: "probe failed: " + hostileText, Provider: "hostdir" + hostileText, ExternalNodeID: "ext-" + id}},
		LastFence: &structs.FenceReport{At: time.Now(), LeaseRemaining: time.Second,
			Volumes: []*structs.FencedVolume{{AllocID: "a-fenced", VolumeID: "v-fenced", Error: "umount: " + hostileText, Done: time.Now()}}},
	}
}

// keepAlive heartbeats node n over a's session until the test ends, as its
// agent would: the servers mark a silent node down within the heartbeat
// TTL (2 s here), which would make its allocation lost and replace the
// description under test.
func keepAlive(t *testing.T, a *attacker, n *structs.Node) {
	t.Helper()
	beat := func() error {
		req := &structs.NodeUpdateStatusRequest{NodeID: n.ID, Status: structs.NodeStatusReady}
		req.AuthToken = n.SecretID
		return a.call("Node.UpdateStatus", req, &structs.NodeUpdateResponse{})
	}
	if err := beat(); err != nil {
		t.Fatalf("heartbeat for %s exp: accepted got: %v", n.ID, err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = beat() // a missed beat is retried at the next tick
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestText_NodeTextIsCheckedWhereItEnters: a node registered with a
// client certificate and no token, entering on a follower, cannot store a
// name that is not printable or a node ID for plugins that would steer a
// path (refused, naming the field, nothing stored); its plugin health
// description, provider and fence errors, and an allocation's client
// description it reports, are stored with their controls escaped.
func TestText_NodeTextIsCheckedWhereItEnters(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)
	a := mustDialAs(t, c, c.Followers()[0].Addr, tlsutil.RoleClient)

	register := func(n *structs.Node) error {
		var reply structs.NodeUpdateResponse
		return a.call("Node.Register", &structs.NodeRegisterRequest{Node: n}, &reply)
	}
	for _, bad := range []struct {
		node  *structs.Node
		field string
	}{
		{hostileNode("text-name", "\x1b]0;pwned\x07\x1b[31mnode-1"), "invalid: name: control character \\x1b at byte 0"},
		{func() *structs.Node {
			n := hostileNode("text-extnode", "n")
			n.CSINodePlugins["hostdir"].ExternalNodeID = "../../../etc"
			return n
		}(), `invalid: csi_node_plugins.hostdir.external_node_id: ../../../etc has a ".." path element`},
	} {
		err := register(bad.node)
		if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("register node %s exp: %s got: %v", bad.node.ID, bad.field, err)
		}
		if rc := rawControl(fmt.Sprint(err)); rc != "" {
			t.Errorf("register node %s: the error exp: printable got: %s in %q", bad.node.ID, rc, err)
		}
		if n, _, err := mgmt.Node(ctx, bad.node.ID, structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
			t.Errorf("node %s after a refused registration exp: not_found got: %v (found: %t)", bad.node.ID, err, n != nil)
		}
	}

	// A plugin's error message longer than a fingerprint may hold (4 KiB)
	// is cut, not a reason to refuse the node.
	n := hostileNode("text-ok", "text-ok")
	n.CSINodePlugins["hostdir"].HealthDescription += strings.Repeat(" and more", 600)
	if err := register(n); err != nil {
		t.Fatalf("register node with hostile free text exp: accepted, sanitised got: %v", err)
	}
	keepAlive(t, a, n)
	got, _, err := mgmt.Node(ctx, n.ID, structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := got.CSINodePlugins["hostdir"]
	stored := map[string]string{"health_description": info.HealthDescription, "provider": info.Provider,
		"last_fence.error": got.LastFence.Volumes[0].Error}
	for field, s := range stored {
		if rc := rawControl(s); rc != "" || !strings.Contains(s, `\x1b]0;pwned\x07\x1b[2J`) || len(s) > structs.MaxFreeTextLen {
			t.Errorf("stored %s exp: controls escaped (\\x1b), at most %d bytes got: %d bytes %q", field, structs.MaxFreeTextLen, len(s), s)
		}
	}

	// The node's allocation: its client description is sanitised too.
	if _, err := mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "text-alloc", NodeID: n.ID}); err != nil {
		t.Fatal(err)
	}
	up := &structs.AllocClientUpdateRequest{NodeID: n.ID, Allocs: []*structs.AllocClientUpdate{
		{ID: "text-alloc", ClientStatus: structs.AllocClientRunning, ClientDescription: "started " + hostileText}}}
	up.AuthToken = n.SecretID
	if err := a.call("Node.UpdateAlloc", up, &structs.GenericResponse{}); err != nil {
		t.Fatalf("alloc update with the node's secret exp: accepted got: %v", err)
	}
	alloc, _, err := mgmt.Alloc(ctx, "text-alloc", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc := rawControl(alloc.ClientDescription); rc != "" || !strings.Contains(alloc.ClientDescription, `started \x1b]0;pwned`) {
		t.Errorf("stored client_description exp: controls escaped got: %q", alloc.ClientDescription)
	}
}

// cliEnv is the environment for the claimd binary to reach server s with
// the cli certificate and the management token.
func cliEnv(c *harness.Cluster, s *harness.TestServer) []string {
	pki := c.PKI()
	return []string{"CLAIMD_ADDR=" + s.Addr, "CLAIMD_CACERT=" + pki.CAFile,
		"CLAIMD_CLIENT_CERT=" + pki.CertFile[tlsutil.RoleCLI], "CLAIMD_CLIENT_KEY=" + pki.KeyFile[tlsutil.RoleCLI],
		"CLAIMD_TOKEN=" + c.ManagementToken()}
}

// TestText_CLIPrintsNodeTextEscaped: text stored before the servers
// checked it (written here straight into the Raft log, as a server before
// the fix stored it) reaches the operator's terminal through the claimd
// binary's node status, plugin status and alloc status, tables and
// details, with every control shown as an escape and none raw; -json
// stays JSON with no raw control either.
func TestText_CLIPrintsNodeTextEscaped(t *testing.T) {
	c := harness.NewCluster(t, 1, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)

	n := hostileNode("old-node", "old"+hostileText)
	if _, _, err := leader.Server().Apply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n, ClientCertified: true}); err != nil {
		t.Fatalf("store the node as an older server did: %v", err)
	}
	keepAlive(t, mustDialAs(t, c, leader.Addr, tlsutil.RoleClient), n)
	if _, err := mgmt.PlaceAllocs(ctx, &structs.Alloc{ID: "old-alloc", NodeID: n.ID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := leader.Server().Apply(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: n.ID,
		Allocs: []*structs.AllocClientUpdate{{ID: "old-alloc", ClientStatus: structs.AllocClientRunning, ClientDescription: "started " + hostileText}}}); err != nil {
		t.Fatalf("store the alloc update as an older server did: %v", err)
	}

	env := cliEnv(c, leader)
	for _, args := range [][]string{
		{"node", "status"}, {"node", "status", n.ID}, {"plugin", "status"}, {"plugin", "status", "hostdir"},
		{"alloc", "status"}, {"alloc", "status", "old-alloc"},
	} {
		r := harness.RunCLIEnv(t, env, args...)
		if r.Code != 0 {
			t.Errorf("claimd %s exp: exit 0 got: %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
			continue
		}
		if rc := rawControl(r.Stdout + r.Stderr); rc != "" {
			t.Errorf("claimd %s exp: no raw terminal control got: %s in %q", strings.Join(args, " "), rc, r.Stdout)
		}
		// The plugin list shows counts, the provider at most.
		if args[0]+args[1] != "pluginstatus" || len(args) > 2 {
			if !strings.Contains(r.Stdout, `\x1b]0;pwned\x07\x1b[2J\x1b[31m`) {
				t.Errorf("claimd %s exp: the node's text shown with visible escapes got: %q", strings.Join(args, " "), r.Stdout)
			}
		}

		r = harness.RunCLIEnv(t, env, append([]string{args[0], args[1], "-json"}, args[2:]...)...)
		var v any
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil {
			t.Errorf("claimd %s -json exp: exit 0, JSON got: %d %q %q", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
		}
		if rc := rawControl(r.Stdout + r.Stderr); rc != "" {
			t.Errorf("claimd %s -json exp: no raw terminal control got: %s in %q", strings.Join(args, " "), rc, r.Stdout)
		}
	}
}

// TestText_ExternalIDIsRefusedNamingTheField: a volume whose external
// ID would steer a plugin that builds paths from it ("../"), carries
// control characters or exceeds CSI's bounds is refused, by the servers
// (the api client, as the HTTP API calls them) and by `volume register`
// before it sends anything, with an error naming external_id; nothing is
// registered. An Azure-style resource path, which starts with "/", is
// accepted.
func TestText_ExternalIDIsRefusedNamingTheField(t *testing.T) {
	c := harness.NewCluster(t, 1, harness.Options{})
	c.StartAll()
	leader := c.WaitForLeader(electionWait)
	mgmt := leader.Client()
	ctx := harness.Ctx(t, 2*time.Minute)
	vol := func(id, ext string) *structs.Volume {
		return &structs.Volume{ID: id, ExternalID: ext, PluginID: "hostdir",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}
	}
	bad := map[string]string{
		"../../../../etc":        `".." path element`,
		"pg/../../../root":       `".." path element`,
		"pgdata\x1b]0;pwned\x07": `control character \x1b`,
		"pgdata\nsecond line":    `control character \n`,
		strings.Repeat("x", 400): "is 400 bytes, at most 256 allowed",
	}
	i := 0
	for ext, problem := range bad {
		i++
		id := fmt.Sprintf("bad-ext-%d", i)
		_, err := mgmt.RegisterVolumes(ctx, vol(id, ext))
		if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "invalid: external_id: ") || !strings.Contains(err.Error(), problem) {
			t.Errorf("register with external_id %q exp: invalid naming external_id and %q got: %v", ext, problem, err)
		}
		if v, _, err := mgmt.Volume(ctx, id, structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
			t.Errorf("volume %s after a refused register exp: not_found got: %v (found: %t)", id, err, v != nil)
		}
	}
	azure := "/subscriptions/9245f5f4-c6a9-4e3a-a8ed-443681bcdf1a/resourceGroups/rg/providers/Microsoft.Compute/disks/pgdata"
	if _, err := mgmt.RegisterVolumes(ctx, vol("azure", azure)); err != nil {
		t.Errorf("register with an Azure disk resource ID exp: accepted got: %v", err)
	}

	// The CLI refuses the spec before sending it, naming the file.
	spec := filepath.Join(t.TempDir(), "vol.hcl")
	if err := os.WriteFile(spec, []byte(`id = "cli-bad"
plugin_id = "hostdir"
external_id = "../../../../etc"
access_mode = "single-node-writer"
attachment_mode = "file-system"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := harness.RunCLIEnv(t, cliEnv(c, leader), "volume", "register", spec)
	if r.Code != 1 || !strings.Contains(r.Stderr, "vol.hcl: invalid: external_id: ") || !strings.Contains(r.Stderr, `".." path element`) {
		t.Errorf("volume register of a spec with external_id ../ exp: exit 1 naming vol.hcl and external_id got: %d %q", r.Code, r.Stderr)
	}
	if v, _, err := mgmt.Volume(ctx, "cli-bad", structs.QueryOptions{}); !errors.Is(err, structs.ErrNotFound) {
		t.Errorf("volume cli-bad exp: not_found got: %v (found: %t)", err, v != nil)
	}
}

// TestText_AgentSelfShowsNoFenceCommand: GET /v1/agent/self, which
// answers without a token, shows that a fence command is set and nothing
// of it: a fence command line may carry a credential.
func TestText_AgentSelfShowsNoFenceCommand(t *testing.T) {
	const credential = "f3nce-cred-7d1e"
	addr, httpAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	dev := harness.StartProcess(t, "dev", "agent", "-dev", "-bind", addr, "-http-addr", httpAddr, "-raft-multiplier", "0.2",
		"-fence-command", `curl -fsS -H "Authorization: Bearer `+credential+`" https://fence.example/stop`)
	env := devCLIEnv(t, dev)
	tlsCfg, err := tlsutil.ClientConfigFromFiles(env["CLAIMD_CACERT"], env["CLAIMD_CLIENT_CERT"], env["CLAIMD_CLIENT_KEY"], tlsutil.DefaultRegion)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 30 * time.Second}
	var body []byte
	harness.WaitFor(t, 60*time.Second, func() error {
		resp, err := hc.Get("https://" + httpAddr + "/v1/agent/self") // no token
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if body, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/agent/self exp: 200 got: %d %s", resp.StatusCode, body)
		}
		return nil
	})
	if strings.Contains(string(body), credential) || strings.Contains(string(body), "fence.example") {
		t.Fatalf("GET /v1/agent/self without a token exp: no fence command got: %q", body)
	}
	var self struct {
		Config struct {
			Client struct {
				FenceCommand string `json:"fence_command"`
			} `json:"client"`
		} `json:"config"`
	}
	if err := json.Unmarshal(body, &self); err != nil || self.Config.Client.FenceCommand != "<redacted>" {
		t.Fatalf("GET /v1/agent/self exp: client.fence_command \"<redacted>\" got: %v %s", err, body)
	}
}

// devCLIEnv reads the CLI environment a dev agent writes (the file its
// "source" line names).
func devCLIEnv(t *testing.T, dev *harness.Process) map[string]string {
	t.Helper()
	env := map[string]string{}
	source := regexp.MustCompile(`source (\S+)`)
	harness.WaitFor(t, 60*time.Second, func() error {
		m := source.FindStringSubmatch(dev.Output())
		if m == nil {
			if dev.Exited() {
				t.Fatalf("dev agent exp: running got: exited\n%s", dev.Output())
			}
			return errors.New("dev agent exp: a source line got: none yet")
		}
		data, err := os.ReadFile(m[1])
		if err != nil {
			return err
		}
		rest, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "export ")
		if !ok {
			return fmt.Errorf("%s exp: an export line got: none", m[1])
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		return nil
	})
	return env
}
