package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// mixedEnv is a secured cluster whose servers run different builds, with
// one client agent of this build and a hostdir node plugin: the setting of
// the holder-detach upgrade test (upgrade_holder_test.go).
type mixedEnv struct {
	dir     string
	pkiDir  string
	addrs   []string
	servers []*harness.Process
	agent   *harness.Process
	c       *api.Client // management token, every server
	cfg     api.Config  // TLS and token, for clients of one server
	nodeID  string
	// certs is how many server certificates were issued (the next server
	// takes the next one).
	certs int
}

// pki is a file of the cluster's PKI directory.
func (e *mixedEnv) pki(f string) string { return filepath.Join(e.pkiDir, f) }

// tlsCLI runs this build's `claimd tls ...` in the PKI directory (the
// certificate layout is the same in every build the tests start).
func (e *mixedEnv) tlsCLI(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(harness.Binary(t), args...)
	cmd.Dir = e.pkiDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("claimd %v: %v\n%s", args, err, out)
	}
}

// serverCert issues the next server certificate and returns its flags.
func (e *mixedEnv) serverCert(t *testing.T) []string {
	t.Helper()
	e.tlsCLI(t, "tls", "cert", "create", "-server", "-additional-ipaddress", "127.0.0.1")
	suffix := ""
	if e.certs > 0 {
		suffix = fmt.Sprintf("-%d", e.certs)
	}
	e.certs++
	return []string{"-tls-ca-file", e.pki("claimd-agent-ca.pem"),
		"-tls-cert-file", e.pki("global-server-claimd" + suffix + ".pem"),
		"-tls-key-file", e.pki("global-server-claimd" + suffix + "-key.pem"), "-acl-enabled"}
}

// mixedStorageLease is every server's storage lease in the mixed cluster:
// the shortest the servers accept (leaderlease.Min). When a server of the
// old build wins the first election the test moves leadership to one of
// this build, whose releases then wait out its hold-off: 7.25 s at this
// lease, 12.5 s at the default. Every server must run the same lease (a
// new leader's hold-off covers the calls of an old one by its own lease).
const mixedStorageLease = "5s"

// startMixedCluster starts len(bins) servers (bins[i] is server i's build,
// "" this build) with TLS and ACLs, bootstraps the ACLs, and starts this
// build's hostdir node plugin and client agent. The agent is given only
// the servers of this build (agentOn): an older server that forwards a
// node's call decodes it into its own structs, so the statement would not
// survive the hop and the gate would never be asked.
func startMixedCluster(t *testing.T, bins []string, agentOn []int) *mixedEnv {
	t.Helper()
	e := &mixedEnv{dir: t.TempDir()}
	e.pkiDir = filepath.Join(e.dir, "pki")
	if err := os.Mkdir(e.pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.tlsCLI(t, "tls", "ca", "create")
	e.tlsCLI(t, "tls", "cert", "create", "-client")
	e.tlsCLI(t, "tls", "cert", "create", "-cli")
	for range bins {
		e.addrs = append(e.addrs, harness.FreeAddr(t))
	}
	for i, bin := range bins {
		name := fmt.Sprintf("s%d", i+1)
		args := append([]string{"agent", "-server", "-bootstrap-expect", fmt.Sprint(len(bins)),
			"-data-dir", filepath.Join(e.dir, name), "-bind", e.addrs[i], "-join", harness.JoinOthers(e.addrs, i),
			"-node-name", name, "-raft-multiplier", "0.2", "-storage-lease", mixedStorageLease}, e.serverCert(t)...)
		e.servers = append(e.servers, harness.StartProcessWith(t, bin, name, args...))
	}

	tlsConf, err := tlsutil.ClientConfigFromFiles(e.pki("claimd-agent-ca.pem"), e.pki("global-cli-claimd.pem"), e.pki("global-cli-claimd-key.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	token := bootstrapACL(t, e.addrs, tlsConf)
	e.cfg = api.Config{TLS: tlsConf, Token: token, Timeout: 15 * time.Second}
	all := e.cfg
	all.Addresses = e.addrs
	if e.c, err = api.NewClient(all); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.c.Close() })

	sockDir, err := os.MkdirTemp("", "claimd-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "hostdir.sock")
	// Monolith, as on a dev agent: hostdir volumes need a controller
	// publish, so a release the node vouches for is node-detached in its
	// own entry and the release watcher then only controller-detaches;
	// one the servers drive gets the watcher's NodeDetach first.
	harness.StartProcess(t, "plugin", "csi-plugin", "hostdir", "-endpoint", "unix://"+sock,
		"-root", filepath.Join(e.dir, "volumes"), "-node-id", "worker1", "-mode", "monolith", "-auto-create")
	var agentAddrs []string
	for _, i := range agentOn {
		agentAddrs = append(agentAddrs, e.addrs[i])
	}
	e.agent = harness.StartProcess(t, "client", "agent", "-client", "-servers", strings.Join(agentAddrs, ","),
		"-data-dir", filepath.Join(e.dir, "client"), "-node-name", "worker1",
		"-csi-plugin", "id=hostdir,type=monolith,socket="+sock,
		"-tls-ca-file", e.pki("claimd-agent-ca.pem"), "-tls-cert-file", e.pki("global-client-claimd.pem"),
		"-tls-key-file", e.pki("global-client-claimd-key.pem"))
	harness.WaitFor(t, 60*time.Second, func() error {
		nodes, _, err := e.c.Nodes(harness.Ctx(t, 15*time.Second), structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(nodes) != 1 || nodes[0].Status != structs.NodeStatusReady {
			return fmt.Errorf("exp: worker1 ready got: %+v", nodes)
		}
		e.nodeID = nodes[0].ID
		return nil
	})
	// With ACLs on, a node's controller gets calls only once admitted
	// (issue 38); every build here can apply the admission.
	harness.WaitFor(t, 60*time.Second, func() error {
		_, err := e.c.AdmitController(harness.Ctx(t, 15*time.Second), "hostdir", e.nodeID)
		return err
	})
	return e
}

// raftServers is the Raft configuration as the leader has it.
func (e *mixedEnv) raftServers(t *testing.T) []structs.RaftServer {
	t.Helper()
	var out []structs.RaftServer
	harness.WaitFor(t, 60*time.Second, func() error {
		conf, err := e.c.RaftConfiguration(harness.Ctx(t, 15*time.Second), false)
		if err != nil {
			return err
		}
		out = conf.Servers
		return nil
	})
	return out
}

// leaderIndex is the index in e.addrs of the leader (-1: none known).
func (e *mixedEnv) leaderIndex(t *testing.T) int {
	t.Helper()
	for _, s := range e.raftServers(t) {
		if s.Leader {
			for i, a := range e.addrs {
				if a == s.Address {
					return i
				}
			}
		}
	}
	return -1
}

// waitHealthy waits until the leader reports n healthy servers and returns
// the leader's term.
func (e *mixedEnv) waitHealthy(t *testing.T, n int) uint64 {
	t.Helper()
	var term uint64
	harness.WaitFor(t, 60*time.Second, func() error {
		h, err := e.c.RaftHealth(harness.Ctx(t, 15*time.Second))
		if err != nil {
			return err
		}
		if !h.Healthy || len(h.Servers) != n {
			return fmt.Errorf("raft health exp: %d healthy servers got: %+v", n, h)
		}
		term = h.Servers[0].LastTerm // the leader's, first
		return nil
	})
	return term
}

// digests waits until the running servers among idx report one state
// index no lower than atLeast (the state is idle: the workload waited for
// its last release), and fails the test unless their state digests are
// equal there (S2). It returns the index and digest.
func (e *mixedEnv) digests(t *testing.T, idx []int, atLeast uint64) (uint64, string) {
	t.Helper()
	ds := make([]*structs.StateDigest, len(idx))
	harness.WaitFor(t, 60*time.Second, func() error {
		for k, i := range idx {
			if e.servers[i].Exited() {
				// No waiting for a server that stopped: say why at once.
				out := e.servers[i].Output()
				if m := corruptEntry.FindString(out); m != "" {
					out = m
				}
				t.Fatalf("%s exp: running, its state compared got: exited (%s)", e.servers[i].Name, tail(out, 600))
			}
			one := e.cfg
			one.Addresses, one.Timeout, one.RetryNoLeaderFor = []string{e.addrs[i]}, 10*time.Second, -1
			cl, err := api.NewClient(one)
			if err != nil {
				return err
			}
			d, err := cl.StateDigest(harness.Ctx(t, 10*time.Second))
			cl.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", e.servers[i].Name, err)
			}
			ds[k] = d
		}
		for k, d := range ds {
			if d.AppliedIndex < atLeast || d.AppliedIndex != ds[0].AppliedIndex {
				return fmt.Errorf("state indexes exp: one index >= %d on every server got: %s (%s at %d)",
					atLeast, e.describeDigests(idx, ds), e.servers[idx[k]].Name, d.AppliedIndex)
			}
		}
		return nil
	})
	for _, d := range ds[1:] {
		if d.SHA256 != ds[0].SHA256 {
			t.Fatalf("S2 exp: one state digest at index %d on every server got: %s", ds[0].AppliedIndex, e.describeDigests(idx, ds))
		}
	}
	return ds[0].AppliedIndex, ds[0].SHA256
}

func (e *mixedEnv) describeDigests(idx []int, ds []*structs.StateDigest) string {
	var parts []string
	for k, d := range ds {
		if d != nil {
			parts = append(parts, fmt.Sprintf("%s@%d=%.12s", e.servers[idx[k]].Name, d.AppliedIndex, d.SHA256))
		}
	}
	return strings.Join(parts, " ")
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
