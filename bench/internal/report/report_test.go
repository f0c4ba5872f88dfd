package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/coordcell/coord/bench/internal/scenario"
)

func children() []Child {
	m := func(name string, v float64) scenario.Metric {
		return scenario.Metric{Name: name, Label: name, Unit: "u", Value: v}
	}
	return []Child{
		{Side: "coord", Scenario: "put", Metrics: []scenario.Metric{m("put.c64.rate", 9000), m("put.c16.p99", 2)},
			CPUSeconds: 3, PeakRSS: 50 << 20},
		{Side: "etcd", Scenario: "put", Metrics: []scenario.Metric{m("put.c64.rate", 3000), m("put.c16.p99", 8)},
			CPUSeconds: 6, PeakRSS: 200 << 20},
		{Side: "coord", Scenario: "sessions-large", Metrics: []scenario.Metric{m("sessions-large.log_entries", 3)},
			PeakRSS: 900 << 20},
	}
}

func row(t *testing.T, rows []Row, name string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %s", name)
	return Row{}
}

func TestRows(t *testing.T) {
	rows := Rows([]string{"put", "sessions-large"}, children())
	r := row(t, rows, "put.c64.rate")
	if *r.Ratio != 3 || r.Verdict != "meets" || r.Target != ">= 3.0x" {
		t.Errorf("put.c64.rate: ratio %v, %s %s", *r.Ratio, r.Verdict, r.Target)
	}
	if r := row(t, rows, "put.c16.p99"); *r.Ratio != 0.25 || r.Verdict != "meets" {
		t.Errorf("put.c16.p99: %+v", r)
	}
	if r := row(t, rows, "put.child_cpu"); *r.Coord != 3 || *r.Etcd != 6 {
		t.Errorf("child CPU row: %+v", r)
	}
	// The peak RSS compares only scenarios both sides ran.
	if r := row(t, rows, "rss.peak"); *r.Coord != 50 || *r.Etcd != 200 || r.Verdict != "meets" {
		t.Errorf("rss.peak: coord %v etcd %v %s", *r.Coord, *r.Etcd, r.Verdict)
	}
	r = row(t, rows, "sessions-large.log_entries")
	if r.Etcd != nil || r.Ratio != nil || r.Verdict != "MISSES" || r.Target != "coord <= 0" {
		t.Errorf("sessions-large.log_entries: %+v", r)
	}
	if v := Verdicts(rows); len(v) != 4 {
		t.Errorf("%d verdicts, want 4", len(v))
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, Rows([]string{"put", "sessions-large"}, children())); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"coord/etcd", "3.00x", "meets (>= 3.0x)", "MISSES", "issue 5 targets:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	WriteMarkdown(&b, Rows([]string{"put"}, children()))
	if !strings.HasPrefix(b.String(), "| figure |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// TestScenarioTarget: a target keyed by scenario/name judges that
// scenario's row alone: CPU per put with one member per process has
// issue 27's target, the one-process row of the same figure none.
func TestScenarioTarget(t *testing.T) {
	m := func(v float64) []scenario.Metric {
		return []scenario.Metric{{Name: "put.c64.cpu_us", Label: "cpu", Unit: "µs", Value: v}}
	}
	rows := Rows([]string{"put", "put@procs"}, []Child{
		{Side: "coord", Scenario: "put", Metrics: m(300)}, {Side: "etcd", Scenario: "put", Metrics: m(400)},
		{Side: "coord", Scenario: "put@procs", Metrics: m(300)}, {Side: "etcd", Scenario: "put@procs", Metrics: m(400)},
	})
	for _, r := range rows {
		if r.Name != "put.c64.cpu_us" {
			continue
		}
		switch r.Scenario {
		case "put":
			if r.Target != "" {
				t.Errorf("one-process row judged: %+v", r)
			}
		case "put@procs":
			if r.Target != "<= 0.6x" || r.Verdict != "MISSES" {
				t.Errorf("procs row: target %q verdict %q", r.Target, r.Verdict)
			}
		}
	}
}
