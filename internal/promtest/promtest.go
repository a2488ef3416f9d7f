// Package promtest reads values out of a Prometheus registry in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value is the value of the series name{labels} in g: a counter's or
// gauge's value, a histogram's sample count; 0 when there is no such
// series. labels are name, value pairs; a series matches when it has
// those (and maybe others).
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, _ := find(t, g, name, labels)
	return v
}

// Present tells whether g holds the series name{labels}.
func Present(t testing.TB, g prometheus.Gatherer, name string, labels ...string) bool {
	t.Helper()
	_, ok := find(t, g, name, labels)
	return ok
}

// Sum is a histogram's sum of samples.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	for _, m := range series(t, g, name, labels) {
		if h := m.GetHistogram(); h != nil {
			return h.GetSampleSum()
		}
	}
	return 0
}

func find(t testing.TB, g prometheus.Gatherer, name string, labels []string) (float64, bool) {
	t.Helper()
	for _, m := range series(t, g, name, labels) {
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func series(t testing.TB, g prometheus.Gatherer, name string, labels []string) []*dto.Metric {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("promtest: labels of %s are not name, value pairs: %q", name, labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("promtest: gathering: %v", err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			out = append(out, m)
		}
	}
	return out
}
