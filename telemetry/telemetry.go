package telemetry

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	prometheussink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/claimd/claimd/version"
)

// DefaultServiceName prefixes every key when Config.ServiceName is empty.
const DefaultServiceName = "claimd"

// The JSON view keeps 10 s intervals for a minute, as Consul and Nomad do:
// long enough to see a rate, short enough that the view is current.
const (
	inmemInterval = 10 * time.Second
	inmemRetain   = time.Minute
)

// Config configures Setup.
type Config struct {
	// ServiceName prefixes every key ("claimd" when empty).
	ServiceName string
	// PrometheusRetention is how long the Prometheus view keeps a metric
	// that is no longer updated (a label value that went away). Zero
	// keeps every metric for the life of the process.
	PrometheusRetention time.Duration
	// DisableHostname stops go-metrics from prefixing gauge names with the
	// host name (claimd.<host>.watcher.pending_evals). Set it when
	// Prometheus scrapes: the scrape target names the host already.
	DisableHostname bool
}

// Telemetry is the process's metrics registry and its views.
type Telemetry struct {
	cfg      Config
	inmem    *metrics.InmemSink
	registry *prometheus.Registry
	prom     http.Handler
}

var (
	setupMu sync.Mutex
	current *Telemetry
)

// Setup installs the global metrics registry (once per process) and
// returns it. Later calls return the Telemetry of the first successful
// call and ignore their Config: go-metrics' registry is global, and tests
// start many servers in one process.
func Setup(cfg Config) (*Telemetry, error) {
	setupMu.Lock()
	defer setupMu.Unlock()
	if current != nil {
		return current, nil
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = DefaultServiceName
	}
	registry := prometheus.NewRegistry()
	promSink, err := prometheussink.NewPrometheusSinkFrom(prometheussink.PrometheusOpts{
		Expiration: cfg.PrometheusRetention,
		Registerer: registry,
		Name:       cfg.ServiceName + "_prometheus_sink",
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus sink: %w", err)
	}
	// claimd_build_info{version, commit, go_version} 1: which build each
	// agent runs, so a rolling upgrade can be watched from the scrapes.
	v := version.Get()
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        cfg.ServiceName + "_build_info",
		Help:        "Always 1; the labels say which claimd build this agent runs.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "go_version": v.GoVersion},
	}, func() float64 { return 1 }))
	routed, err := newHistogramRouter(promSink, registry, cfg.ServiceName)
	if err != nil {
		return nil, fmt.Errorf("telemetry: histograms: %w", err)
	}
	inmem := metrics.NewInmemSink(inmemInterval, inmemRetain)
	mcfg := metrics.DefaultConfig(cfg.ServiceName)
	mcfg.EnableHostname = !cfg.DisableHostname
	if _, err := metrics.NewGlobal(mcfg, metrics.FanoutSink{inmem, routed}); err != nil {
		return nil, fmt.Errorf("telemetry: global registry: %w", err)
	}
	current = &Telemetry{
		cfg:      cfg,
		inmem:    inmem,
		registry: registry,
		// ContinueOnError: one inconsistent family must not hide the rest
		// of the scrape.
		prom: promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
	}
	return current, nil
}

// Config returns the configuration the registry was set up with.
func (t *Telemetry) Config() Config { return t.cfg }

// Handler serves the metrics: JSON (the last finished interval of the
// in-memory view) by default, the Prometheus text format (content type
// text/plain; version=0.0.4) with ?format=prometheus. It checks no
// credentials: the caller wraps it with its own access check.
func (t *Telemetry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("format") {
		case "prometheus":
			t.prom.ServeHTTP(w, r)
		case "", "json":
			t.serveJSON(w)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"unknown metrics format: use format=prometheus, or none for JSON","code":"invalid"}` + "\n"))
		}
	})
}
