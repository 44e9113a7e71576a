package csi

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/internal/testutil"
)

// changes collects what OnChange reports.
type changes struct {
	mu  sync.Mutex
	all [][]PluginFingerprint
}

func (c *changes) record(fps []PluginFingerprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, fps)
}

func (c *changes) last() ([]PluginFingerprint, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.all) == 0 {
		return nil, 0
	}
	return c.all[len(c.all)-1], len(c.all)
}

// waitReported polls until the newest report satisfies check.
func (c *changes) waitReported(t *testing.T, check func([]PluginFingerprint) error) []PluginFingerprint {
	t.Helper()
	var got []PluginFingerprint
	testutil.WaitFor(t, 10*time.Second, func() error {
		fps, n := c.last()
		if n == 0 {
			return fmt.Errorf("nothing reported yet")
		}
		got = fps
		return check(fps)
	})
	return got
}

func mustManager(t *testing.T, plugins []PluginConfig, ch *changes) *Manager {
	t.Helper()
	m, err := NewManager(ManagerConfig{
		Plugins:       plugins,
		ProbeInterval: 20 * time.Millisecond,
		ProbeTimeout:  2 * time.Second,
		OnChange:      ch.record,
		Logger:        testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func healthy(want bool) func([]PluginFingerprint) error {
	return func(fps []PluginFingerprint) error {
		for _, fp := range fps {
			if fp.Healthy != want {
				return fmt.Errorf("plugin %s healthy=%t (%s)", fp.ID, fp.Healthy, fp.HealthDescription)
			}
		}
		return nil
	}
}

func TestManagerFingerprintsAndTracksHealth(t *testing.T) {
	tp := mustNewPlugin(t, func(c *hostdir.Config) { c.MaxVolumes = 7 })
	ch := &changes{}
	m := mustManager(t, []PluginConfig{{ID: "hostdir", Type: PluginTypeMonolith, Socket: "unix://" + tp.socket}}, ch)
	m.Start()

	fps := ch.waitReported(t, healthy(true))
	fp := fps[0]
	if fp.ID != "hostdir" || fp.Name != hostdir.DefaultName || !fp.RequiresControllerPublish ||
		!fp.RequiresStaging || !fp.SupportsReadOnlyAttach || fp.NodeExternalID != "ext-node-1" || fp.MaxVolumes != 7 {
		t.Fatalf("exp: full hostdir fingerprint got: %+v", fp)
	}

	// Probes start failing: the change is reported with the reason, and the
	// facts learnt earlier are kept.
	tp.control(t, hostdir.Control{Fail: map[string]int{"Probe": 1 << 30}})
	fps = ch.waitReported(t, healthy(false))
	if !strings.Contains(fps[0].HealthDescription, "injected") || fps[0].NodeExternalID != "ext-node-1" {
		t.Fatalf("exp: unhealthy with reason, node ID kept got: %+v", fps[0])
	}

	// Reports come only on change: with the plugin steadily unhealthy, a
	// few more rounds add nothing.
	_, before := ch.last()
	m.Refresh(testCtx(t))
	m.Refresh(testCtx(t))
	if _, after := ch.last(); after != before {
		t.Fatalf("exp: no report without a change got: %d reports after %d", after, before)
	}

	tp.control(t, hostdir.Control{})
	ch.waitReported(t, healthy(true))
}

func TestManagerReportsUnreachableAndTypeMismatch(t *testing.T) {
	node := mustNewPlugin(t, func(c *hostdir.Config) { c.Mode = hostdir.ModeNode })
	ch := &changes{}
	m := mustManager(t, []PluginConfig{
		{ID: "gone", Type: PluginTypeNode, Socket: "/nonexistent/dir/p.sock"},
		{ID: "node-only", Type: PluginTypeNode, Socket: node.socket},
		{ID: "wrong-type", Type: PluginTypeController, Socket: node.socket},
	}, ch)
	fps := m.Refresh(testCtx(t))
	if len(fps) != 3 || fps[0].ID != "gone" || fps[0].Healthy || fps[2].Healthy ||
		!strings.Contains(fps[2].HealthDescription, "ControllerGetCapabilities") {
		t.Fatalf("exp: unreachable and mistyped plugins unhealthy with reasons got: %+v", fps)
	}
	// A node-only plugin still says its volumes need a controller publish.
	if n := fps[1]; !n.Healthy || !n.RequiresControllerPublish || !n.RequiresStaging || n.NodeExternalID != "ext-node-1" {
		t.Fatalf("exp: healthy node plugin needing a controller got: %+v", n)
	}
	if _, n := ch.last(); n != 1 {
		t.Fatalf("exp: the first round reported got: %d reports", n)
	}
}

func TestManagerConfigValidation(t *testing.T) {
	for _, plugins := range [][]PluginConfig{
		{{ID: "", Type: PluginTypeNode, Socket: "/s"}},
		{{ID: "a", Type: "sidecar", Socket: "/s"}},
		{{ID: "a", Type: PluginTypeNode, Socket: "tcp://x"}},
		{{ID: "a", Type: PluginTypeNode, Socket: "/s"}, {ID: "a", Type: PluginTypeNode, Socket: "/t"}},
	} {
		if _, err := NewManager(ManagerConfig{Plugins: plugins}); err == nil {
			t.Errorf("%+v exp: refused got: accepted", plugins)
		}
	}
	pc, err := ParsePluginConfig("id=hostdir,type=monolith,socket=unix:///run/h.sock")
	if err != nil || pc != (PluginConfig{ID: "hostdir", Type: PluginTypeMonolith, Socket: "unix:///run/h.sock"}) {
		t.Fatalf("exp: parsed got: %+v %v", pc, err)
	}
	if pc, err := ParsePluginConfig("id=c,type=controller,socket=/run/c.sock,controller_calls=8"); err != nil || pc.ControllerCalls != 8 {
		t.Errorf("controller_calls=8 exp: parsed as 8 got: %+v %v", pc, err)
	}
	for _, bad := range []string{"id=c,type=controller,socket=/p,controller_calls=0", "id=c,type=controller,socket=/p,controller_calls=x",
		"id=c,type=controller,socket=/p,controller_calls=257", "id=n,type=node,socket=/p,controller_calls=2"} {
		if _, err := ParsePluginConfig(bad); err == nil || !strings.Contains(err.Error(), "controller_calls") {
			t.Errorf("%q exp: an error naming controller_calls got: %v", bad, err)
		}
	}
	if _, err := ParsePluginConfig("id=x,type=node,sock=/p"); err == nil {
		t.Fatal("exp: unknown key refused got: nil")
	}
}

// TestManagerStopLeavesNoGoroutines: Stop ends the loop, waits for a round
// in flight (here, one stuck in a slow Probe) and closes the clients.
func TestManagerStopLeavesNoGoroutines(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	tp.control(t, hostdir.Control{Delay: map[string]string{"Probe": "1h"}})
	base := runtime.NumGoroutine()

	ch := &changes{}
	m, err := NewManager(ManagerConfig{
		Plugins:       []PluginConfig{{ID: "hostdir", Type: PluginTypeMonolith, Socket: tp.socket}},
		ProbeInterval: 10 * time.Millisecond,
		ProbeTimeout:  time.Hour,
		OnChange:      ch.record,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	// Wait until the first round has reached the delayed Probe: the node
	// capabilities are the last thing it asks before probing.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(tp.auditMethods(t, "NodeGetCapabilities")) == 0 {
			return fmt.Errorf("round not at the probe yet")
		}
		return nil
	})
	done := make(chan struct{})
	go func() { m.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("exp: Stop returns got: blocked")
	}
	m.Stop() // idempotent
	if _, n := ch.last(); n != 0 {
		t.Fatalf("exp: a round cut short by Stop is not reported got: %d reports", n)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > base {
			return fmt.Errorf("%d goroutines, %d before the manager", n, base)
		}
		return nil
	})
}
