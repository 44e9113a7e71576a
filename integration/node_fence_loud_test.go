package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/httpapi"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/telemetry"
	"github.com/claimd/claimd/tlsutil"
)

// A failed fence is loud (issue 39, item 4): w1 is cut off, its fence
// command fails (it cannot reach the workload, which keeps writing), the
// servers release the claim once the lease ran out, as they must (they
// cannot know), and w1 reports the failure when it is back. From then
// the volume says it may still be written on w1: `volume status`, the
// HTTP API's volume JSON, the volume's health (abnormal: a volume that
// asks for it refuses new claims), the claimd.fence.failed gauge, and an
// ERROR line on the leader. Deregistering w1 (an operator's word that the
// node is gone) clears it, and the volume takes claims again.
func TestNodeFence_FailedFenceIsLoud(t *testing.T) {
	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "claimd", DisableHostname: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := &errorLines{}
	e := newFenceEnvOpts(t, fenceOpts{hookFails: true, configure: func(cfg *server.Config) {
		cfg.Logger = errs.tee(t, cfg.NodeName)
	}})
	v := testVolume("vf")
	v.NodeLost = structs.NodeLostFence
	v.RefuseClaimsWhenAbnormal = true
	if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
		t.Fatal(err)
	}
	e.run(t, "a1", "w1", "vf")
	e.waitAlloc(t, "a1", structs.AllocClientRunning)
	w1 := e.clients["w1"]
	node1 := w1.NodeID()
	mount := mountPath(t, w1, "a1", "vf")
	startWriter(t, "w1", mount, filepath.Join(e.pidDir, "a1-vf")) // the failing hook cannot stop it

	e.c.Net.Isolate("w1")
	hookStart(t, e.hookLog, "a1") // the fence ran, and failed
	// The servers release once the lease has run out: the claim is freed
	// through the fence path, and nothing says yet that it failed.
	harness.WaitFor(t, structs.LeaseExpiry(fenceLease)+30*time.Second, func() error {
		v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if v.HasClaims() || len(v.Released) == 0 || !v.Released[len(v.Released)-1].Fenced {
			return fmt.Errorf("vf exp: a1's claim freed through the fence got: past %v released %v", v.PastClaims, v.Released)
		}
		if len(v.FenceFailures) != 0 {
			return fmt.Errorf("vf exp: no failure known before w1 reports got: %+v", v.FenceFailures)
		}
		return nil
	})

	e.c.Net.Heal()
	var failure *structs.FenceFailure
	harness.WaitFor(t, 30*time.Second, func() error {
		v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if len(v.FenceFailures) != 1 || v.Health() != structs.VolumeAbnormal {
			return fmt.Errorf("vf exp: w1's failed fence recorded, abnormal got: %+v", v.FenceFailures)
		}
		failure = v.FenceFailures[0]
		return nil
	})
	if failure.NodeID != node1 || failure.AllocID != "a1" || failure.HookOK || !strings.Contains(failure.Error, "cannot reach the workload of a1") {
		t.Fatalf("failure exp: w1/a1, fence command failed with its message got: %+v", failure)
	}

	// The CLI.
	st := harness.RunCLIEnv(t, e.cliEnv(t), "volume", "status", "vf")
	wantWarn := fmt.Sprintf("WARNING: volume vf may still be written on node %s (alloc a1): fence command failed: ", node1)
	if st.Code != 0 || !strings.Contains(st.Stdout, wantWarn) || !strings.Contains(st.Stdout, "cannot reach the workload of a1") ||
		!strings.Contains(st.Stdout, "Health") || !strings.Contains(st.Stdout, "= abnormal") {
		t.Fatalf("volume status exp: abnormal and %q got: %d\n%s%s", wantWarn, st.Code, st.Stdout, st.Stderr)
	}
	if strings.Contains(st.Stdout, "s3cret") {
		t.Fatalf("volume status exp: no volume secret got:\n%s", st.Stdout)
	}

	// The HTTP API's volume JSON, from a follower's agent (forwarded or
	// its own state: both hold the entry).
	follower := e.c.Followers()[0]
	h := startHTTPAPI(t, httpapi.Config{TLS: e.c.PKI().Configurator(t, tlsutil.RoleServer), RPCAddrs: []string{follower.Addr},
		Dialer: e.c.Net.Dialer(follower.Name), Server: follower.Server()})
	tlsCfg := e.c.PKI().CLIConfig(t).Clone()
	tlsCfg.ServerName = ""
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodGet, h.URL()+"/v1/volume/vf", nil)
	req.Header.Set(httpapi.TokenHeader, e.c.ManagementToken())
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		FenceFailures []map[string]any `json:"fence_failures"`
	}
	if err := json.Unmarshal(body, &got); resp.StatusCode != http.StatusOK || err != nil || len(got.FenceFailures) != 1 ||
		got.FenceFailures[0]["node_id"] != node1 || got.FenceFailures[0]["hook_ok"] != false ||
		!strings.Contains(fmt.Sprint(got.FenceFailures[0]["error"]), "cannot reach the workload") {
		t.Fatalf("GET /v1/volume/vf exp: fence_failures with w1's failure got: %d %s", resp.StatusCode, body)
	}

	// The gauge (every server sets it from its state each second).
	harness.WaitFor(t, 10*time.Second, func() error {
		if n, ok := scrapeProm(t, tel).value(gaugeName(tel, "fence_failed"), nil); !ok || n != 1 {
			return fmt.Errorf("claimd_fence_failed exp: 1 got: %v (found %v)", n, ok)
		}
		return nil
	})
	// The leader's ERROR line.
	wantLog := fmt.Sprintf("volume vf may still be written on node %s", node1)
	harness.WaitFor(t, 10*time.Second, func() error {
		if !errs.contains(wantLog) {
			return fmt.Errorf("server ERROR lines exp: %q got: %q", wantLog, errs.String())
		}
		return nil
	})

	// Abnormal, and the volume asks to refuse claims then: w2's waits,
	// saying why.
	e.run(t, "a3", "w2", "vf")
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), "a3", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus == structs.AllocClientRunning || !strings.Contains(a.ClientDescription, "may still be written on node") {
			return fmt.Errorf("a3 exp: waiting, refused because vf may still be written on w1 got: %s (%s)", a.ClientStatus, a.ClientDescription)
		}
		return nil
	})

	// The operator deregisters w1 (gone for good): cleared, the gauge
	// falls, and w2's claim goes through.
	w1.Stop()
	if _, err := e.api.DeregisterNodes(harness.Ctx(t, 30*time.Second), node1); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "a3", structs.AllocClientRunning)
	if v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "vf", structs.QueryOptions{}); err != nil || v.FenceFailures != nil || v.Health() != structs.VolumeHealthy {
		t.Fatalf("vf after w1's deregistration exp: healthy got: %+v %v", v, err)
	}
	harness.WaitFor(t, 10*time.Second, func() error {
		if n, _ := scrapeProm(t, tel).value(gaugeName(tel, "fence_failed"), nil); n != 0 {
			return fmt.Errorf("claimd_fence_failed exp: 0 got: %v", n)
		}
		return nil
	})
}

// errorLines tees each server's log: every line to the test log as the
// harness does, ERROR lines also kept for the test to read.
type errorLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (e *errorLines) tee(t *testing.T, name string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testLog{t}})
	l.RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Name: name, Level: hclog.Error, Output: e}))
	return l
}

func (e *errorLines) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buf.Write(p)
}

func (e *errorLines) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.buf.String()
}

func (e *errorLines) contains(s string) bool { return strings.Contains(e.String(), s) }

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // the test may have finished
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
