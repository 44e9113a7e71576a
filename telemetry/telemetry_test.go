package telemetry

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// mustSetup sets up the process's registry (once: every test here shares
// it, as every server of a process does).
func mustSetup(t *testing.T) *Telemetry {
	t.Helper()
	tel, err := Setup(Config{ServiceName: "claimd", DisableHostname: true})
	if err != nil {
		t.Fatalf("exp: Setup succeeds got: %v", err)
	}
	return tel
}

func get(t *testing.T, h http.Handler, query string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics"+query, nil))
	return rec
}

// scrape parses the Prometheus view with the Prometheus project's own
// text parser.
func scrape(t *testing.T, tel *Telemetry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := get(t, tel.Handler(), "?format=prometheus")
	if rec.Code != http.StatusOK {
		t.Fatalf("exp: 200 got: %d %s", rec.Code, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("exp: content type text/plain; version=0.0.4 got: %q", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("exp: parseable Prometheus text got: %v", err)
	}
	return fams
}

// metricWith returns the metric of family name whose labels include want.
func metricWith(fams map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, error) {
	fam, ok := fams[name]
	if !ok {
		return nil, fmt.Errorf("no family %s", name)
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("family %s has no metric with labels %v", name, want)
}

func TestSetup_SecondCallReturnsTheFirstRegistry(t *testing.T) {
	first := mustSetup(t)
	second, err := Setup(Config{ServiceName: "other", DisableHostname: false})
	if err != nil || second != first {
		t.Fatalf("exp: the same Telemetry got: %p %p %v", first, second, err)
	}
	if got := second.Config().ServiceName; got != "claimd" {
		t.Fatalf("exp: the first config kept (claimd) got: %q", got)
	}
}

func TestHandler_PrometheusCounterMovesWithEachIncrement(t *testing.T) {
	tel := mustSetup(t)
	labels := []metrics.Label{{Name: "result", Value: "ok"}}
	metrics.IncrCounterWithLabels([]string{"test", "moves"}, 1, labels)
	m, err := metricWith(scrape(t, tel), "claimd_test_moves", map[string]string{"result": "ok"})
	if err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("exp: claimd_test_moves{result=ok} 1 got: %v %v", m, err)
	}
	metrics.IncrCounterWithLabels([]string{"test", "moves"}, 2, labels)
	m, err = metricWith(scrape(t, tel), "claimd_test_moves", map[string]string{"result": "ok"})
	if err != nil || m.GetCounter().GetValue() != 3 {
		t.Fatalf("exp: claimd_test_moves{result=ok} 3 got: %v %v", m, err)
	}
}

func TestHandler_SamplesAreSummariesAndGaugesHaveNoHostname(t *testing.T) {
	tel := mustSetup(t)
	metrics.SetGauge([]string{"test", "gauge"}, 7)
	metrics.MeasureSinceWithLabels([]string{"test", "timer"}, time.Now().Add(-20*time.Millisecond),
		[]metrics.Label{{Name: "method", Value: "Volume.Claim"}})
	fams := scrape(t, tel)
	g, err := metricWith(fams, "claimd_test_gauge", nil)
	if err != nil || g.GetGauge().GetValue() != 7 {
		t.Fatalf("exp: claimd_test_gauge 7 got: %v %v", g, err)
	}
	s, err := metricWith(fams, "claimd_test_timer", map[string]string{"method": "Volume.Claim"})
	if err != nil || s.GetSummary().GetSampleCount() != 1 || s.GetSummary().GetSampleSum() < 20 {
		t.Fatalf("exp: claimd_test_timer summary, 1 sample of at least 20 ms got: %v %v", s, err)
	}
}

func TestHandler_StopToFreedIsAHistogramWithBuckets(t *testing.T) {
	tel := mustSetup(t)
	before := histogramCount(t, scrape(t, tel), "hist-test")
	metrics.AddSampleWithLabels([]string{"release", "stop_to_freed"}, 1500, []metrics.Label{{Name: "plugin", Value: "hist-test"}})
	fams := scrape(t, tel)
	if got := fams["claimd_release_stop_to_freed"].GetType(); got != dto.MetricType_HISTOGRAM {
		t.Fatalf("exp: claimd_release_stop_to_freed is a histogram got: %v", got)
	}
	m, _ := metricWith(fams, "claimd_release_stop_to_freed", map[string]string{"plugin": "hist-test"})
	if got := histogramCount(t, fams, "hist-test"); got != before+1 {
		t.Fatalf("exp: %d observations got: %d", before+1, got)
	}
	for _, b := range m.GetHistogram().GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 1500 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Fatalf("exp: bucket le=%v holds %d got: %d", b.GetUpperBound(), want, b.GetCumulativeCount())
		}
	}
}

func histogramCount(t *testing.T, fams map[string]*dto.MetricFamily, plugin string) uint64 {
	m, err := metricWith(fams, "claimd_release_stop_to_freed", map[string]string{"plugin": plugin})
	if err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func TestHandler_JSONShowsCountersSamplesAndGauges(t *testing.T) {
	tel := mustSetup(t)
	metrics.IncrCounterWithLabels([]string{"test", "json_counter"}, 1, []metrics.Label{{Name: "op", Value: "claim"}})
	metrics.AddSample([]string{"test", "json_sample"}, 4)
	metrics.SetGauge([]string{"test", "json_gauge"}, 3)
	// The JSON view is the last finished 10 s interval (or the first one
	// while it is the only one): poll until the interval that holds
	// these values is the one shown.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := get(t, tel.Handler(), "")
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("exp: application/json got: %q", ct)
		}
		var sum metrics.MetricsSummary
		if err := json.Unmarshal(rec.Body.Bytes(), &sum); err != nil {
			t.Fatalf("exp: JSON got: %v %s", err, rec.Body.String())
		}
		err := jsonHas(sum)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("exp: counter, sample and gauge in the JSON view got: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func jsonHas(sum metrics.MetricsSummary) error {
	var counter, sample, gauge bool
	for _, c := range sum.Counters {
		counter = counter || c.Name == "claimd.test.json_counter" && c.DisplayLabels["op"] == "claim" && c.Count >= 1
	}
	for _, s := range sum.Samples {
		sample = sample || s.Name == "claimd.test.json_sample" && s.Max == 4
	}
	for _, g := range sum.Gauges {
		gauge = gauge || g.Name == "claimd.test.json_gauge" && g.Value == 3
	}
	if !counter || !sample || !gauge {
		return fmt.Errorf("counter %v sample %v gauge %v in %+v", counter, sample, gauge, sum)
	}
	return nil
}

func TestHandler_UnknownFormatIsRefused(t *testing.T) {
	tel := mustSetup(t)
	if rec := get(t, tel.Handler(), "?format=xml"); rec.Code != http.StatusBadRequest {
		t.Fatalf("exp: 400 got: %d", rec.Code)
	}
}

// Raft emits through go-metrics' compat package: a real Raft node's
// commits show up in this registry, under the service name.
func TestRaftMetricsReachTheRegistry(t *testing.T) {
	tel := mustSetup(t)
	before := raftCommits(scrape(t, tel))

	conf := raft.DefaultConfig()
	conf.LocalID = "telemetry-test"
	conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	conf.Logger = hclog.NewNullLogger()
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{
		Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}); err != nil {
		t.Fatalf("exp: bootstrap got: %v", err)
	}
	r, err := raft.NewRaft(conf, nopFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatalf("exp: raft starts got: %v", err)
	}
	defer func() { _ = r.Shutdown().Error() }()
	deadline := time.Now().Add(10 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatalf("exp: leader within 10s got: %v", r.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		if err := r.Apply([]byte("x"), time.Second).Error(); err != nil {
			t.Fatalf("exp: apply got: %v", err)
		}
	}
	if after := raftCommits(scrape(t, tel)); after < before+3 {
		t.Fatalf("exp: claimd_raft_commitTime count >= %d got: %d", before+3, after)
	}
}

func raftCommits(fams map[string]*dto.MetricFamily) uint64 {
	var n uint64
	for _, m := range fams["claimd_raft_commitTime"].GetMetric() {
		n += m.GetSummary().GetSampleCount()
	}
	return n
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("no snapshots") }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }
