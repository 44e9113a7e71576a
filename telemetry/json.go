package telemetry

import (
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// serveJSON writes the in-memory view in the shape Consul's and Nomad's
// /v1/agent/metrics use (Timestamp, Gauges, Points, Counters, Samples).
func (t *Telemetry) serveJSON(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(t.Summary())
}

// Summary is the JSON view: the most recent finished interval, or the
// current one while it is the only one.
//
// Not InmemSink.DisplayMetrics: its summary shares each sample's
// aggregate with the interval (a write after the interval ended would race
// with the encoder), and its standard deviation is NaN when rounding makes
// the variance slightly negative (which encoding/json refuses). This copies
// under the interval's lock and maps NaN and infinities to 0.
func (t *Telemetry) Summary() metrics.MetricsSummary {
	data := t.inmem.Data()
	intv := data[len(data)-1]
	if len(data) > 1 {
		intv = data[len(data)-2]
	}
	intv.RLock()
	defer intv.RUnlock()
	out := metrics.MetricsSummary{
		Timestamp: intv.Interval.Round(time.Second).UTC().String(),
		Gauges:    make([]metrics.GaugeValue, 0, len(intv.Gauges)),
		Points:    make([]metrics.PointValue, 0, len(intv.Points)),
	}
	for hash, g := range intv.Gauges {
		g.Hash, g.DisplayLabels, g.Labels = hash, displayLabels(g.Labels), nil
		g.Value = float32(finite(float64(g.Value)))
		out.Gauges = append(out.Gauges, g)
	}
	sort.Slice(out.Gauges, func(i, j int) bool { return out.Gauges[i].Hash < out.Gauges[j].Hash })
	for name, points := range intv.Points {
		out.Points = append(out.Points, metrics.PointValue{Name: name, Points: append([]float32(nil), points...)})
	}
	sort.Slice(out.Points, func(i, j int) bool { return out.Points[i].Name < out.Points[j].Name })
	out.Counters = samples(intv.Counters)
	out.Samples = samples(intv.Samples)
	return out
}

func samples(in map[string]metrics.SampledValue) []metrics.SampledValue {
	out := make([]metrics.SampledValue, 0, len(in))
	for hash, s := range in {
		if s.AggregateSample == nil {
			continue
		}
		agg := *s.AggregateSample
		agg.Sum, agg.SumSq, agg.Rate = finite(agg.Sum), finite(agg.SumSq), finite(agg.Rate)
		agg.Min, agg.Max = finite(agg.Min), finite(agg.Max)
		out = append(out, metrics.SampledValue{
			Name:            s.Name,
			Hash:            hash,
			AggregateSample: &agg,
			Mean:            finite(agg.Mean()),
			Stddev:          finite(agg.Stddev()),
			DisplayLabels:   displayLabels(s.Labels),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hash < out[j].Hash })
	return out
}

func displayLabels(labels []metrics.Label) map[string]string {
	out := make(map[string]string, len(labels))
	for _, l := range labels {
		out[l.Name] = l.Value
	}
	return out
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
