package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func row(system, cs, transport string, metrics ...Metric) Row {
	return Row{System: system, Case: cs, Transport: transport, Metrics: metrics}
}

func TestCompareRuns(t *testing.T) {
	prev := &Run{Profile: "quick", Results: []Result{
		{Scenario: "fanout", Rows: []Row{
			row("lehr", "N=100", "", Metric{"p50", 20, "ms"}, Metric{"p99", 26, "ms"}, Metric{"missed", 0, ""}),
			row("etcd", "N=100", "", Metric{"p50", 4, "ms"}, Metric{"p99", 7, "ms"}),
			row("lehr/etcd", "N=100", "", Metric{"p50", 5, "×"}),
			row("nats", "N=10000", "", Metric{"p50", 1, "ms"}),
		}},
		{Scenario: "wirebytes", Rows: []Row{row("lehr", "1KiB", "", Metric{"frame", 1281, "B"}, Metric{"as snapshot", 1, ""})}},
		{Scenario: "gone", Rows: []Row{row("lehr", "x", "", Metric{"p50", 1, "ms"})}},
	}}
	cur := &Run{Profile: "quick", PeerTransport: TransportPeerTLS, Results: []Result{
		{Scenario: "fanout", Rows: []Row{
			row("lehr", "N=100", TransportLehr, Metric{"p50", 15, "ms"}, Metric{"p99", 26, "ms"}, Metric{"missed", 0, ""}),
			row("etcd", "N=100", TransportPeerTLS, Metric{"p50", 5, "ms"}, Metric{"p99", 7, "ms"}),
			row("lehr/etcd", "N=100", "", Metric{"p50", 3, "×"}),
			row("etcd", "N=10000", TransportPeerTLS, Metric{"p50", 100, "ms"}),
		}},
		{Scenario: "wirebytes", Rows: []Row{row("lehr", "1KiB", "", Metric{"frame", 1200, "B"}, Metric{"as snapshot", 1, ""})}},
		{Scenario: "new", Rows: []Row{row("lehr", "y", "", Metric{"p50", 1, "ms"})}},
	}}
	got := CompareRuns(prev, cur)
	want := Changes{
		Rows: []RowChange{
			{Scenario: "fanout", System: "lehr", Case: "N=100", CurTransport: TransportLehr,
				Deltas: []Delta{{"p50", "ms", 20, 15}, {"p99", "ms", 26, 26}}},
			{Scenario: "fanout", System: "etcd", Case: "N=100", PrevTransport: TransportPeerPlaintext, CurTransport: TransportPeerTLS,
				Deltas: []Delta{{"p50", "ms", 4, 5}, {"p99", "ms", 7, 7}}},
			{Scenario: "wirebytes", System: "lehr", Case: "1KiB", Deltas: []Delta{{"frame", "B", 1281, 1200}}},
		},
		Added:   []string{"fanout etcd N=10000"},
		Removed: []string{"fanout nats N=10000"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CompareRuns (-want +got):\n%s", diff)
	}
	var md bytes.Buffer
	if err := got.WriteMarkdown(&md, "old.json", "new.json"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"| fanout | lehr | N=100 | 20 → 15 (−25 %) | 26 → 26 (+0 %) | – | " + TransportLehr + " |",
		"**changed**: " + TransportPeerPlaintext + " → " + TransportPeerTLS,
		"frame 1281 → 1200 (−6.3 %)",
		"New rows: fanout etcd N=10000.",
		"Rows no longer measured: fanout nats N=10000.",
	} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
}

func TestDeltaPercent(t *testing.T) {
	tests := []struct {
		d    Delta
		want float64
	}{
		{Delta{Prev: 10, Cur: 15}, 50},
		{Delta{Prev: 10, Cur: 5}, -50},
		{Delta{Prev: 0, Cur: 0}, 0},
		{Delta{Prev: 0, Cur: 3}, math.Inf(1)},
		{Delta{Prev: -2, Cur: -1}, 50},
	}
	for _, tt := range tests {
		if got := tt.d.Percent(); got != tt.want {
			t.Errorf("%+v.Percent() = %v, want %v", tt.d, got, tt.want)
		}
	}
}

func TestPreviousRunAndWriteChanges(t *testing.T) {
	dir := t.TempDir()
	at := func(h int) time.Time { return time.Date(2026, 11, 21, h, 0, 0, 0, time.UTC) }
	mk := func(h int, profile string, p50 float64) *Run {
		return &Run{Started: at(h), Profile: profile, Results: []Result{{Scenario: "fanout",
			Rows: []Row{row("lehr", "N=100", "", Metric{"p50", p50, "ms"})}}}}
	}
	for _, r := range []*Run{mk(8, "quick", 30), mk(9, "quick", 20), mk(10, "full", 10), mk(12, "quick", 99)} {
		if _, err := WriteJSON(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "fanout-quick-N1000-cpu-top10.txt"), []byte("not json"), 0o644)
	cur := mk(11, "quick", 25)
	prev, path, err := PreviousRun(dir, cur)
	if err != nil {
		t.Fatalf("PreviousRun: %v", err)
	}
	if prev == nil || !prev.Started.Equal(at(9)) || filepath.Base(path) != "20261121T090000Z.json" {
		t.Fatalf("PreviousRun = %v, %q; want the 09:00 quick run", prev, path)
	}
	var out bytes.Buffer
	md, err := WriteChanges(dir, cur, &out)
	if err != nil {
		t.Fatalf("WriteChanges: %v", err)
	}
	if filepath.Base(md) != "20261121T110000Z-changes.md" {
		t.Errorf("changes file = %q", md)
	}
	b, _ := os.ReadFile(md)
	if string(b) != out.String() || !strings.Contains(string(b), "20 → 25 (+25 %)") {
		t.Errorf("changes file:\n%s\nstdout:\n%s", b, out.String())
	}
	if p, _, err := PreviousRun(dir, mk(7, "quick", 1)); err != nil || p != nil {
		t.Errorf("PreviousRun of the oldest = %v, %v; want nil, nil", p, err)
	}
	if path, err := WriteChanges(filepath.Join(dir, "missing"), cur, nil); err != nil || path != "" {
		t.Errorf("WriteChanges without previous runs = %q, %v; want \"\", nil", path, err)
	}
}

func TestLabelTransports(t *testing.T) {
	res := &Result{Rows: []Row{
		{System: "lehr"}, {System: "lehr cost"}, {System: "etcd"}, {System: "nats", Transport: "kept"},
		{System: "lehr/etcd"}, {System: "other"},
	}}
	labelTransports(res, TransportPeerTLS)
	var got []string
	for _, r := range res.Rows {
		got = append(got, r.Transport)
	}
	want := []string{TransportLehr, TransportLehr, TransportPeerTLS, "kept", TransportLehr + " vs " + TransportPeerTLS, ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transports (-want +got):\n%s", diff)
	}
	alone := &Result{Rows: []Row{{System: "lehr"}}}
	labelTransports(alone, TransportPeerTLS)
	if alone.Rows[0].Transport != "" {
		t.Errorf("a result without peers got transport %q, want none", alone.Rows[0].Transport)
	}
}
