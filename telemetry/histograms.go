package telemetry

import (
	"strings"

	metrics "github.com/hashicorp/go-metrics/compat"
	prometheussink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// histogramDef turns one sample key into a Prometheus histogram. The
// go-metrics Prometheus sink shows every sample as a summary whose
// quantiles cover the last 10 s only and cannot be aggregated across
// servers; an operator asking "how long do releases take" over an hour
// needs buckets. The JSON view keeps the sample as it is.
type histogramDef struct {
	// key without the service name, as the emitter passes it.
	key  []string
	help string
	// labels the emitter attaches (others are dropped, missing ones are
	// empty): a histogram vector has a fixed set of label names.
	labels []string
	// buckets in the sample's unit (milliseconds, as for every timer).
	buckets []float64
}

// histograms: keep the keys in step with their emitters.
var histograms = []histogramDef{{
	// watcher/metrics.go: from the leader's first sight of a past claim
	// to its free.
	key:     []string{"release", "stop_to_freed"},
	help:    "Milliseconds from the leader's release watcher first seeing a past claim (its allocation stopped or released it) to the claim being freed.",
	labels:  []string{"plugin"},
	buckets: []float64{100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000},
}}

// histogramRouter sends the samples of the keys in histograms to their
// histogram and everything else to the Prometheus sink.
type histogramRouter struct {
	*prometheussink.PrometheusSink
	byKey map[string]*routedHistogram
}

type routedHistogram struct {
	labels []string
	vec    *prometheus.HistogramVec
}

func newHistogramRouter(sink *prometheussink.PrometheusSink, reg prometheus.Registerer, service string) (*histogramRouter, error) {
	r := &histogramRouter{PrometheusSink: sink, byKey: map[string]*routedHistogram{}}
	for _, d := range histograms {
		full := append([]string{service}, d.key...)
		vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    promName(full),
			Help:    d.help,
			Buckets: d.buckets,
		}, d.labels)
		if err := reg.Register(vec); err != nil {
			return nil, err
		}
		r.byKey[strings.Join(full, ".")] = &routedHistogram{labels: d.labels, vec: vec}
	}
	return r, nil
}

// promName flattens a key as the Prometheus sink does.
func promName(parts []string) string {
	return strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_").Replace(strings.Join(parts, "_"))
}

func (r *histogramRouter) AddSample(key []string, val float32) {
	r.AddSampleWithLabels(key, val, nil)
}

func (r *histogramRouter) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	h, ok := r.byKey[strings.Join(key, ".")]
	if !ok {
		r.PrometheusSink.AddSampleWithLabels(key, val, labels)
		return
	}
	values := make([]string, len(h.labels))
	for i, name := range h.labels {
		for _, l := range labels {
			if l.Name == name {
				values[i] = l.Value
			}
		}
	}
	h.vec.WithLabelValues(values...).Observe(float64(val))
}
