package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/telemetry"
	"github.com/claimd/claimd/version"
)

// promView is one scrape of the Prometheus view, parsed by the Prometheus
// project's own text parser.
type promView map[string]*dto.MetricFamily

func scrapeProm(t *testing.T, tel *telemetry.Telemetry) promView {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics?format=prometheus", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics exp: 200 got: %d %s", rec.Code, rec.Body.String())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("metrics exp: Prometheus text got: %v", err)
	}
	return fams
}

// value sums, over the metrics of family name whose labels include want,
// a counter's or gauge's value or a summary's or histogram's sample count.
// ok is false when no metric matches.
func (v promView) value(name string, want map[string]string) (sum float64, ok bool) {
next:
	for _, m := range v[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, val := range want {
			if have[k] != val {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Summary != nil:
			sum += float64(m.GetSummary().GetSampleCount())
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, ok
}

// gaugeName is a gauge's Prometheus name: go-metrics puts the host name
// after the service name unless the registry was set up without it (the
// first Setup of the process decides).
func gaugeName(tel *telemetry.Telemetry, rest string) string {
	if tel.Config().DisableHostname {
		return "claimd_" + rest
	}
	host, _ := os.Hostname()
	return "claimd_" + strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_").Replace(host) + "_" + rest
}

// A three-server cluster with TLS and ACLs: claims, a refused claim, an
// explicit release, an allocation's stop and its volume's release through
// both detach steps, a forwarded write, a denied call, a refused plaintext
// connection and a failed handshake each move their metric, and Raft's own
// commit time is in the same registry.
func TestMetrics_PrometheusViewMovesWithClaimsReleasesAndRaft(t *testing.T) {
	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "claimd", DisableHostname: true})
	if err != nil {
		t.Fatalf("telemetry setup exp: no error got: %v", err)
	}
	e := newReleaseEnv(t, "w1")
	leader := e.c.WaitForLeader(electionWait)
	var follower *harness.TestServer
	for _, s := range e.c.Servers {
		if s != leader {
			follower = s
			break
		}
	}
	before := scrapeProm(t, tel)
	// Which build this agent runs, for watching a rolling upgrade.
	v := version.Get()
	if n, ok := before.value("claimd_build_info", map[string]string{"version": v.Version, "commit": v.Commit, "go_version": v.GoVersion}); !ok || n != 1 {
		t.Fatalf("claimd_build_info exp: 1 with this build's labels got: %v (found %v)", n, ok)
	}

	// Registered through a follower: forwarded to the leader.
	if _, err := follower.Client().RegisterVolumes(harness.Ctx(t, 30*time.Second), testVolume("mv1")); err != nil {
		t.Fatalf("register through a follower exp: no error got: %v", err)
	}
	e.run(t, "ma1", "w1", "mv1")
	e.waitAlloc(t, "ma1", structs.AllocClientRunning)
	e.c.WaitForHolderDetach(30 * time.Second)
	// A claim the state machine refuses, and a release of nothing.
	_, err = e.api.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{
		VolumeID: "no-such-volume", AllocID: "ma1", NodeID: e.clients["w1"].NodeID(), Mode: structs.ClaimModeWrite})
	if !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("claim of a missing volume exp: not_found got: %v", err)
	}
	if _, err := e.api.Release(harness.Ctx(t, 30*time.Second), "mv1", "no-such-alloc"); err != nil {
		t.Fatalf("release of no claim exp: no error got: %v", err)
	}
	// The allocation stops: the node's own node detach recorded in the
	// release entry (decision 61), the controller detach, freed.
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "ma1"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "ma1", structs.AllocClientComplete)
	e.waitFreed(t, "mv1", 60*time.Second)
	// A token nobody issued, a plaintext connection, a handshake of junk.
	_, _, err = e.c.Servers[0].ClientWithToken("00000000-0000-4000-8000-000000000000").
		Volumes(harness.Ctx(t, 30*time.Second), "", structs.QueryOptions{})
	if !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("unknown token exp: permission_denied got: %v", err)
	}
	if _, err := expectClosed(dialRaw(t, e.c.Servers[1].Addr, byte(rpc.ProtoRPC)), 15*time.Second); err != nil {
		t.Fatalf("plaintext connection: %v", err)
	}
	junk := append([]byte{byte(rpc.ProtoTLS)}, []byte("GET / HTTP/1.1\r\n\r\n")...)
	if _, err := expectClosed(dialRaw(t, e.c.Servers[2].Addr, junk...), 15*time.Second); err != nil {
		t.Fatalf("junk handshake: %v", err)
	}

	moves := []struct {
		name   string
		labels map[string]string
	}{
		{"claimd_claim_requests", map[string]string{"op": "claim", "result": "ok"}},
		{"claimd_claim_requests", map[string]string{"op": "claim", "result": "not_found"}},
		{"claimd_claim_requests", map[string]string{"op": "release", "result": "ok"}},
		{"claimd_batch_size", map[string]string{"batch": "claim"}},
		{"claimd_batch_size", map[string]string{"batch": "checkpoint"}},
		{"claimd_release_holder_detached", nil},
		{"claimd_release_attempts", map[string]string{"plugin": "hostdir", "step": "controller_detach"}},
		{"claimd_release_stop_to_freed", map[string]string{"plugin": "hostdir"}},
		{"claimd_rpc_request", map[string]string{"method": "Volume.Claim"}},
		{"claimd_rpc_errors", map[string]string{"method": "Volume.List", "code": "permission_denied"}},
		{"claimd_forward_calls", map[string]string{"method": "Volume.Register", "result": "ok"}},
		{"claimd_forward_latency", map[string]string{"method": "Volume.Register"}},
		{"claimd_acl_denied", map[string]string{"method": "Volume.List"}},
		{"claimd_tls_plaintext_refused", nil},
		{"claimd_tls_handshake_failures", nil},
		{"claimd_raft_commitTime", nil},
		{"claimd_raft_apply", nil},
		{"claimd_raft_fsm_apply", nil},
	}
	harness.WaitFor(t, 30*time.Second, func() error {
		after := scrapeProm(t, tel)
		var stuck []string
		for _, m := range moves {
			was, _ := before.value(m.name, m.labels)
			now, ok := after.value(m.name, m.labels)
			if !ok || now <= was {
				stuck = append(stuck, fmt.Sprintf("%s%v exp: > %v got: %v (present %v)", m.name, m.labels, was, now, ok))
			}
		}
		if len(stuck) > 0 {
			return errors.New(strings.Join(stuck, "; "))
		}
		return nil
	})

	// The gauges are set every second by each server (all in this one
	// process, so only their presence and the replicated node count are
	// checked).
	harness.WaitFor(t, 10*time.Second, func() error {
		v := scrapeProm(t, tel)
		for _, name := range []string{"server_client_sessions", "watcher_pending_evals", "watcher_queued", "watcher_backoff"} {
			if _, ok := v.value(gaugeName(tel, name), nil); !ok {
				return fmt.Errorf("gauge %s exp: present got: absent", gaugeName(tel, name))
			}
		}
		if n, _ := v.value(gaugeName(tel, "state_nodes"), map[string]string{"status": "ready"}); n < 2 {
			return fmt.Errorf("%s{status=ready} exp: >= 2 got: %v", gaugeName(tel, "state_nodes"), n)
		}
		if _, ok := v.value(gaugeName(tel, "state_nodes"), map[string]string{"status": "down"}); !ok {
			return fmt.Errorf("%s{status=down} exp: present (0) got: absent", gaugeName(tel, "state_nodes"))
		}
		return nil
	})

	// Raft's replication metrics name the peer in a label, never in the
	// metric's name (claimd_raft_replication_heartbeat_26c8a41f_...).
	peerInName := regexp.MustCompile(`[0-9a-f]{8}_[0-9a-f]{4}_`)
	harness.WaitFor(t, 20*time.Second, func() error {
		v := scrapeProm(t, tel)
		for name := range v {
			if strings.HasPrefix(name, "claimd_raft_") && peerInName.MatchString(name) {
				return fmt.Errorf("metric %s exp: the peer as a label got: the peer in the name", name)
			}
		}
		for _, name := range []string{"claimd_raft_replication_appendEntries_rpc", "claimd_raft_replication_heartbeat"} {
			found := false
			for _, m := range v[name].GetMetric() {
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == "peer_id" && l.GetValue() != ""
				}
			}
			if !found {
				return fmt.Errorf("%s{peer_id} exp: present got: absent", name)
			}
		}
		return nil
	})

	// The JSON view shows the same registry: its last finished 10 s
	// interval, so a refused claim (one Raft commit) is made on every try
	// until an interval that holds some is the one shown.
	harness.WaitFor(t, 30*time.Second, func() error {
		_, _ = e.api.Claim(harness.Ctx(t, 30*time.Second), &structs.VolumeClaimRequest{
			VolumeID: "no-such-volume", AllocID: "ma1", NodeID: e.clients["w1"].NodeID(), Mode: structs.ClaimModeWrite})
		rec := httptest.NewRecorder()
		tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics", nil))
		var sum metrics.MetricsSummary
		if err := json.Unmarshal(rec.Body.Bytes(), &sum); err != nil {
			return fmt.Errorf("JSON view exp: JSON got: %v", err)
		}
		var claims, commits bool
		for _, c := range sum.Counters {
			claims = claims || c.Name == "claimd.claim.requests" && c.DisplayLabels["op"] == "claim"
		}
		for _, s := range sum.Samples {
			commits = commits || s.Name == "claimd.raft.commitTime"
		}
		if !claims || !commits {
			return fmt.Errorf("JSON view exp: claimd.claim.requests and claimd.raft.commitTime got: claims %v commits %v", claims, commits)
		}
		return nil
	})
}
