package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/tlsutil"
)

// TestPlugin is an in-process hostdir CSI plugin on a real unix socket,
// with an audit log and a control file for faults. Stop and Start keep the
// socket path, root and audit log, as a restarted plugin process would.
type TestPlugin struct {
	ID, Name    string
	Mode        hostdir.Mode
	Socket      string
	Root        string
	AuditLog    string
	ControlFile string
	NodeID      string
	// MaxVolumes is NodeGetInfo's max_volumes_per_node (0 = no limit);
	// set it through StartPlugin's edit functions.
	MaxVolumes int64
	// Topology is the plugin's -topology segments (none: no topology);
	// set it through StartPlugin's edit functions or before a restart.
	Topology map[string]string
	// NoAutoCreate turns off creating a volume's directory on first use,
	// so that only CreateVolume makes volumes (set it before Start).
	NoAutoCreate bool
	t            testing.TB

	mu sync.Mutex
	p  *hostdir.Plugin
}

// sockDir is a short directory for unix sockets (paths must stay under 108
// bytes, and test temp dirs can be long).
func sockDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cld")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StartPlugin starts a hostdir plugin named name with plugin ID "hostdir".
// root is shared by every plugin of one storage system (controllers see the
// nodes that registered under it); volumes are created on first use.
// edits change the plugin's settings before it starts.
func StartPlugin(t testing.TB, name string, mode hostdir.Mode, root string, edits ...func(*TestPlugin)) *TestPlugin {
	t.Helper()
	dir := sockDir(t)
	logDir := t.TempDir()
	p := &TestPlugin{
		ID: "hostdir", Name: name, Mode: mode, Root: root, NodeID: "ext-" + name,
		Socket:      filepath.Join(dir, "csi.sock"),
		AuditLog:    filepath.Join(logDir, "audit.jsonl"),
		ControlFile: filepath.Join(logDir, "control.json"),
		t:           t,
	}
	for _, edit := range edits {
		edit(p)
	}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start (re)starts the plugin.
func (p *TestPlugin) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		return
	}
	_ = os.Remove(p.Socket)
	plug, err := hostdir.New(hostdir.Config{
		Endpoint: "unix://" + p.Socket, Root: p.Root, NodeID: p.NodeID, Mode: p.Mode,
		AuditLog: p.AuditLog, ControlFile: p.ControlFile, AutoCreateVolumes: !p.NoAutoCreate,
		MaxVolumes: p.MaxVolumes, Topology: p.Topology,
		// Symlinks, not bind mounts: a test that ends with volumes
		// published must not leave mounts behind in its temp dirs (bind
		// mounts are covered by the hostdir package's own tests).
		MountMethod: hostdir.MountSymlink,
		Logger:      testLogger(p.t, "plugin-"+p.Name),
	})
	if err != nil {
		p.t.Fatalf("plugin %s: %v", p.Name, err)
	}
	if err := plug.Start(); err != nil {
		p.t.Fatalf("plugin %s start: %v", p.Name, err)
	}
	p.p = plug
}

// Stop stops serving; the socket goes away, as when a plugin dies.
func (p *TestPlugin) Stop() {
	p.mu.Lock()
	plug := p.p
	p.p = nil
	p.mu.Unlock()
	if plug != nil {
		plug.Stop()
	}
}

// Config is how a client agent is told about this plugin.
func (p *TestPlugin) Config() csi.PluginConfig {
	typ := csi.PluginTypeMonolith
	switch p.Mode {
	case hostdir.ModeNode:
		typ = csi.PluginTypeNode
	case hostdir.ModeController:
		typ = csi.PluginTypeController
	}
	return csi.PluginConfig{ID: p.ID, Type: typ, Socket: "unix://" + p.Socket}
}

// Audit reads the plugin's audit log.
func (p *TestPlugin) Audit() []hostdir.AuditEntry {
	p.t.Helper()
	entries, err := hostdir.ReadAudit(p.AuditLog)
	if err != nil && !os.IsNotExist(err) {
		p.t.Fatalf("read audit log of %s: %v", p.Name, err)
	}
	return entries
}

// SetControl writes the plugin's fault-injection control file.
func (p *TestPlugin) SetControl(c hostdir.Control) {
	p.t.Helper()
	if err := hostdir.WriteControl(p.ControlFile, c); err != nil {
		p.t.Fatal(err)
	}
}

// TestClient is an in-process client agent whose dials go through the
// cluster's partitionable network under its own host name.
type TestClient struct {
	Name    string
	DataDir string
	c       *Cluster
	servers []string
	plugins []csi.PluginConfig
	// edit changes the agent's config before each start (a node lease,
	// a fence command).
	edit func(*client.Config)

	mu sync.Mutex
	a  *client.Agent
}

// StartClient starts a client agent that connects to servers (in order)
// and runs plugins.
func (c *Cluster) StartClient(name string, servers []string, plugins ...csi.PluginConfig) *TestClient {
	c.t.Helper()
	return c.StartClientWith(name, servers, nil, plugins...)
}

// StartClientWith is StartClient with edit applied to the agent's config
// on every start.
func (c *Cluster) StartClientWith(name string, servers []string, edit func(*client.Config), plugins ...csi.PluginConfig) *TestClient {
	c.t.Helper()
	tc := &TestClient{Name: name, DataDir: filepath.Join(c.t.TempDir(), name), c: c, servers: servers, plugins: plugins, edit: edit}
	tc.Start()
	c.t.Cleanup(tc.Stop)
	return tc
}

// Start (re)starts the agent on its data dir (same node ID).
func (tc *TestClient) Start() {
	tc.c.t.Helper()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.a != nil {
		return
	}
	cfg := client.Config{
		Servers: tc.servers, DataDir: tc.DataDir, NodeName: tc.Name, Plugins: tc.plugins,
		ProbeInterval: 200 * time.Millisecond, Logger: testLogger(tc.c.t, "client-"+tc.Name),
		Dialer: tc.c.Net.Dialer(tc.Name),
	}
	if pki := tc.c.PKI(); pki != nil {
		cfg.TLS = pki.Configurator(tc.c.t, tlsutil.RoleClient)
	} else if !tc.c.opts.Insecure {
		// Without TLS a new node registers with a node:write token.
		cfg.RegisterToken = tc.c.ManagementToken()
	}
	if tc.c.opts.ConfigureClient != nil {
		tc.c.opts.ConfigureClient(&cfg)
	}
	if tc.edit != nil {
		tc.edit(&cfg)
	}
	a, err := client.New(cfg)
	if err != nil {
		tc.c.t.Fatalf("client %s: %v", tc.Name, err)
	}
	tc.a = a
}

// Stop stops the agent (no heartbeats; its mounts stay).
func (tc *TestClient) Stop() {
	tc.mu.Lock()
	a := tc.a
	tc.a = nil
	tc.mu.Unlock()
	if a != nil {
		a.Shutdown()
	}
}

// NodeID is the agent's node ID (stable across restarts).
func (tc *TestClient) NodeID() string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.a == nil {
		tc.c.t.Fatalf("client %s is not running", tc.Name)
	}
	return tc.a.NodeID()
}

// NodeIDOffline is the node ID kept in the agent's data dir, readable while
// the agent is stopped.
func (tc *TestClient) NodeIDOffline() string {
	tc.c.t.Helper()
	b, err := os.ReadFile(filepath.Join(tc.DataDir, "node-identity.json"))
	if err != nil {
		tc.c.t.Fatal(err)
	}
	var id struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		tc.c.t.Fatal(err)
	}
	return id.ID
}
