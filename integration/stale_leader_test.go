package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/internal/faultpoint"
	"github.com/claimd/claimd/structs"
)

// staleLeaderEnv is three real server processes that stop themselves
// (SIGSTOP) at an armed fault point, and two in-process client agents
// (w1, w2) each with a real hostdir plugin (controller and node) on a unix
// socket, whose audit logs record every CSI call.
type staleLeaderEnv struct {
	addrs   []string
	procs   map[string]*harness.Process
	points  string // the fault-point file the servers read
	plugins map[string]*harness.TestPlugin
	agents  map[string]*client.Agent
	nodeIDs map[string]string
	apis    map[string]*api.Client
	leader  string
	root    string
	dir     string
}

// startAgents (re)starts both agents on their data dirs, connected only to
// the servers that do not lead now: the leader is the one a case stops,
// and an agent whose session is on a stopped server is unreachable until
// it notices (not what these cases are about).
func (e *staleLeaderEnv) startAgents(t *testing.T) {
	t.Helper()
	var servers []string
	for _, addr := range e.addrs {
		if addr != e.leader {
			servers = append(servers, addr)
		}
	}
	for _, w := range []string{"w1", "w2"} {
		if a := e.agents[w]; a != nil {
			a.Shutdown()
		}
		a, err := client.New(client.Config{
			Servers: servers, DataDir: filepath.Join(e.dir, w), NodeName: w,
			Plugins: []csi.PluginConfig{e.plugins[w].Config()}, ProbeInterval: 200 * time.Millisecond,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "agent-" + w, Output: os.Stderr, Level: hclog.Info}),
		})
		if err != nil {
			t.Fatal(err)
		}
		e.agents[w] = a
		e.nodeIDs[w] = a.NodeID()
	}
	for _, w := range []string{"w1", "w2"} {
		id := e.nodeIDs[w]
		harness.WaitFor(t, 30*time.Second, func() error {
			for _, addr := range servers {
				var resp structs.NodeConnResponse
				if err := e.apis[addr].Call(harness.Ctx(t, 5*time.Second), "Status.HasNodeConn", &structs.NodeConnRequest{NodeID: id}, &resp); err != nil {
					return err
				}
				if resp.Connected {
					return nil
				}
			}
			return fmt.Errorf("agent %s exp: a session on a server that does not lead got: none yet", w)
		})
	}
}

func newStaleLeaderEnv(t *testing.T) *staleLeaderEnv {
	dir := t.TempDir()
	e := &staleLeaderEnv{
		addrs:   []string{harness.FreeAddr(t), harness.FreeAddr(t), harness.FreeAddr(t)},
		procs:   map[string]*harness.Process{},
		points:  filepath.Join(dir, "fault-points"),
		plugins: map[string]*harness.TestPlugin{},
		agents:  map[string]*client.Agent{},
		nodeIDs: map[string]string{},
		apis:    map[string]*api.Client{},
	}
	if err := os.WriteFile(e.points, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The server processes inherit the variable; this test process read
	// it (empty) when it started, so its agents never stop.
	t.Setenv(faultpoint.Env, e.points)
	for i, addr := range e.addrs {
		name := fmt.Sprintf("s%d", i+1)
		// A short storage lease keeps the new leader's hold-off (lease·1.05
		// + 2 s) short; the reconciler runs only on demand, so the only
		// storage calls are the ones the test causes.
		e.procs[addr] = harness.StartProcess(t, name, "agent", "-server",
			"-bootstrap-expect", "3", "-join", harness.JoinOthers(e.addrs, i),
			"-bind", addr, "-data-dir", filepath.Join(dir, name), "-node-name", name,
			"-storage-lease", "5s", "-reconcile-interval", "-1s", "-log-level", "debug")
		cl, err := api.NewClient(api.Config{Addresses: []string{addr}, Timeout: 10 * time.Second, RetryNoLeaderFor: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		e.apis[addr] = cl
	}
	e.leader = e.waitLeader(t, "")
	e.root, e.dir = t.TempDir(), dir
	for _, w := range []string{"w1", "w2"} {
		e.plugins[w] = harness.StartPlugin(t, w, hostdir.ModeMonolith, e.root)
	}
	e.startAgents(t)
	harness.WaitFor(t, 30*time.Second, func() error {
		plug, _, err := e.apis[e.leader].Plugin(harness.Ctx(t, 5*time.Second), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if plug.ControllersHealthy != 2 || plug.NodesHealthy != 2 {
			return fmt.Errorf("hostdir exp: 2 healthy controllers and nodes got: %d, %d", plug.ControllersHealthy, plug.NodesHealthy)
		}
		return nil
	})
	return e
}

// waitLeader waits until the servers other than not agree on a leader
// that is not `not`.
func (e *staleLeaderEnv) waitLeader(t *testing.T, not string) string {
	t.Helper()
	var leader string
	harness.WaitFor(t, 60*time.Second, func() error {
		for _, addr := range e.addrs {
			if addr == not {
				continue
			}
			l, err := e.apis[addr].Leader(harness.Ctx(t, 2*time.Second))
			if err != nil {
				return err
			}
			if l == "" || l == not {
				return fmt.Errorf("server %s: no new leader yet (%q)", addr, l)
			}
			leader = l
		}
		return nil
	})
	return leader
}

// arm makes the next server that reaches point stop there.
func (e *staleLeaderEnv) arm(t *testing.T, point string) {
	t.Helper()
	if err := os.WriteFile(e.points, []byte(point+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitStopped waits until a server process has stopped itself at the
// armed point (the one leading when it decided the call), and returns it.
func (e *staleLeaderEnv) waitStopped(t *testing.T) string {
	t.Helper()
	var stopped string
	harness.WaitFor(t, 60*time.Second, func() error {
		for _, addr := range e.addrs {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.procs[addr].PID()))
			if err != nil {
				return err
			}
			// The state follows the command name in parentheses.
			if fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(fields) > 0 && fields[0] == "T" {
				stopped = addr
				return nil
			}
		}
		return errors.New("exp: the leader stopped at the fault point got: every server running")
	})
	return stopped
}

// run places an allocation of vol on node and waits until its agent runs
// it: claimed, controller-published, mounted.
func (e *staleLeaderEnv) run(t *testing.T, server, vol, alloc, node string) {
	t.Helper()
	e.place(t, server, vol, alloc, node)
	harness.WaitFor(t, 60*time.Second, func() error {
		a, _, err := e.apis[server].Alloc(harness.Ctx(t, 10*time.Second), alloc, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("alloc %s exp: running got: %s (%s)", alloc, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

func (e *staleLeaderEnv) place(t *testing.T, server, vol, alloc, node string) {
	t.Helper()
	a := &structs.Alloc{ID: alloc, NodeID: e.nodeIDs[node], Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}}
	if _, err := e.apis[server].PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatalf("place alloc %s: %v", alloc, err)
	}
}

// stop stops an allocation: its agent reports it, and the leader releases
// its claim.
func (e *staleLeaderEnv) stop(t *testing.T, server, alloc string) {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		_, err := e.apis[server].StopAllocs(harness.Ctx(t, 10*time.Second), alloc)
		return err
	})
}

func (e *staleLeaderEnv) waitVolume(t *testing.T, server, vol string, ok func(*structs.Volume) error) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, func() error {
		v, _, err := e.apis[server].Volume(harness.Ctx(t, 5*time.Second), vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		return ok(v)
	})
}

// storageCalls lists every call that changes the storage, from both
// plugins' audit logs.
func (e *staleLeaderEnv) storageCalls() []hostdir.AuditEntry {
	var out []hostdir.AuditEntry
	for _, p := range e.plugins {
		for _, en := range p.Audit() {
			switch en.Method {
			case "ControllerPublishVolume", "ControllerUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume",
				"NodeStageVolume", "NodePublishVolume", "ControllerExpandVolume", "NodeExpandVolume":
				out = append(out, en)
			}
		}
	}
	return out
}

// TestStaleLeader_PausedBeforeAStorageCallMakesNoneAfterTheNewLeader stops
// the leader (SIGSTOP, the whole process) exactly between deciding a
// storage call and making it: a claim's controller publish, a release's
// node detach, a release's controller detach, a controller expand.
// Meanwhile a new leader frees the volume and grants it to the other node
// (or grows it further). When the old leader resumes it must make no
// storage call at all: its lease ran out while it was stopped, its
// confirmation fails, and it drops the call (decision 46).
// Before the lease it sent the stale call (issue 37: a ControllerPublish
// of a single-node volume to a second node).
func TestStaleLeader_PausedBeforeAStorageCallMakesNoneAfterTheNewLeader(t *testing.T) {
	e := newStaleLeaderEnv(t)
	t.Cleanup(func() {
		for _, a := range e.agents {
			a.Shutdown()
		}
	})
	cases := []struct {
		name, method string
		// setup runs before the point is armed; trigger makes the leader
		// decide the call (it stops inside it).
		setup, trigger func(t *testing.T, vol string)
		// meanwhile is what the new leader does; nil: it frees the volume
		// (the agent's claim of a1 goes on through another server, the
		// allocation is stopped, its release done) and gives it to an
		// allocation on w2.
		meanwhile func(t *testing.T, vol string)
		// created: the volume is created through the plugin, not only
		// registered.
		created bool
	}{
		{
			name: "publish", method: "ClientCSI.ControllerAttachVolume",
			setup:   func(t *testing.T, vol string) {},
			trigger: func(t *testing.T, vol string) { e.place(t, e.leader, vol, vol+"-a1", "w1") },
		},
		{
			// Released by call, not by the allocation's stop: at a stop the
			// agent unmounts first and says so (decision 61), and the
			// servers then make no node detach at all.
			name: "node-detach", method: "ClientCSI.NodeDetachVolume",
			setup: func(t *testing.T, vol string) { e.run(t, e.leader, vol, vol+"-a1", "w1") },
			trigger: func(t *testing.T, vol string) {
				if _, err := e.apis[e.leader].Release(harness.Ctx(t, 10*time.Second), vol, vol+"-a1"); err != nil {
					t.Fatalf("release of %s-a1 exp: ok got: %v", vol, err)
				}
			},
		},
		{
			name: "controller-detach", method: "ClientCSI.ControllerDetachVolume",
			setup:   func(t *testing.T, vol string) { e.run(t, e.leader, vol, vol+"-a1", "w1") },
			trigger: func(t *testing.T, vol string) { e.stop(t, e.leader, vol+"-a1") },
		},
		{
			// The old leader decided to grow the volume to 4 MiB; the new
			// one grows it to 6 MiB. A stale expand after that would be
			// made on state the old leader read before the new one's.
			name: "expand", method: "ClientCSI.ControllerExpandVolume", created: true,
			setup: func(t *testing.T, vol string) {},
			trigger: func(t *testing.T, vol string) {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, _ = e.apis[e.leader].ExpandVolume(ctx, vol, 4<<20)
				}()
			},
			meanwhile: func(t *testing.T, vol string) {
				harness.WaitFor(t, 60*time.Second, func() error {
					_, err := e.apis[e.leader].ExpandVolume(harness.Ctx(t, 30*time.Second), vol, 6<<20)
					return err
				})
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vol := "v-" + tc.name
			e.leader = e.waitLeader(t, "")
			e.startAgents(t)
			if tc.created {
				harness.WaitFor(t, 60*time.Second, func() error {
					_, err := e.apis[e.leader].CreateVolume(harness.Ctx(t, 30*time.Second), createSpec(vol))
					return err
				})
			} else if _, err := e.apis[e.leader].RegisterVolumes(harness.Ctx(t, 10*time.Second), &structs.Volume{
				ID: vol, ExternalID: vol, PluginID: "hostdir",
				AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem}); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, vol)
			e.arm(t, "storage-call:"+tc.method)
			tc.trigger(t, vol)
			old := e.waitStopped(t)
			// A case that fails leaves no server stopped for the next.
			t.Cleanup(func() { _ = syscall.Kill(e.procs[old].PID(), syscall.SIGCONT) })

			e.leader = e.waitLeader(t, old)
			if tc.meanwhile != nil {
				tc.meanwhile(t, vol)
			} else {
				e.stop(t, e.leader, vol+"-a1")
				e.waitVolume(t, e.leader, vol, func(v *structs.Volume) error {
					if len(v.PastClaims) > 0 || len(v.WriteClaims) > 0 {
						return fmt.Errorf("exp: every claim freed got: %d past, %d live", len(v.PastClaims), len(v.WriteClaims))
					}
					return nil
				})
				e.run(t, e.leader, vol, vol+"-a2", "w2")
			}
			before := len(e.storageCalls())

			// The old leader resumes where it stopped, on stale state.
			if err := syscall.Kill(e.procs[old].PID(), syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			dropped := "storage call not made: method=" + tc.method
			for deadline := time.Now().Add(90 * time.Second); !strings.Contains(e.procs[old].Output(), dropped); {
				if time.Now().After(deadline) {
					// Where it is stuck: Go prints every goroutine on SIGQUIT.
					_ = syscall.Kill(e.procs[old].PID(), syscall.SIGQUIT)
					time.Sleep(2 * time.Second)
					t.Fatalf("the resumed leader exp: %q logged got: not within 90s", dropped)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if calls := e.storageCalls(); len(calls) != before {
				t.Fatalf("deposed leader exp: no storage call after the new leader's got: %+v", calls[before:])
			}
			// The old leader rejoins as a follower, and the volume stays
			// as the new leader left it.
			e.waitVolume(t, old, vol, func(v *structs.Volume) error {
				if tc.meanwhile != nil {
					if v.Capacity != 6<<20 {
						return fmt.Errorf("exp: the new leader's 6 MiB got: %d bytes", v.Capacity)
					}
					return nil
				}
				if c := v.WriteClaims[vol+"-a2"]; c == nil || !c.ControllerPublished || len(v.WriteClaims) != 1 {
					return fmt.Errorf("exp: only w2's claim got: %v", v.WriteClaims)
				}
				return nil
			})
		})
	}
}
