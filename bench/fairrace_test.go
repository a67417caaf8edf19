package bench

import (
	"strings"
	"testing"
)

func TestFairRaceTargets(t *testing.T) {
	row := func(sys string, p99, cpu, missed float64) Row {
		r := Row{System: sys, Case: "N=100"}
		r.Add("p99", p99, "ms").Add("missed", missed, "").Add("dup", 0, "").Add("server cpu/delivery", cpu, "µs")
		return r
	}
	for _, tc := range []struct {
		name  string
		lehr  Row
		peers []Row
		met   []bool   // p99, cpu, none missed
		got   []string // substrings of each target's Got
	}{
		{"behind both", row("lehr", 4, 60, 0), []Row{row("etcd", 3, 40, 0), row("nats", 2, 30, 0)},
			[]bool{false, false, true}, []string{"nats 2 ms (2.00×)", "nats 30 µs (2.00×)", "missed = 0"}},
		{"ahead of the best", row("lehr", 1, 20, 0), []Row{row("etcd", 3, 25, 0), row("nats", 2, 30, 0)},
			[]bool{true, true, true}, []string{"nats 2 ms (0.50×)", "etcd 25 µs (0.80×)", ""}},
		{"tie is met; a miss is not", row("lehr", 2, 30, 3), []Row{row("nats", 2, 30, 0)},
			[]bool{true, true, false}, []string{"(1.00×)", "(1.00×)", "missed = 3"}},
		{"a zero figure has no ratio", row("lehr", 2, 0, 0), []Row{row("nats", 2, 0, 0)},
			[]bool{true, true, true}, []string{"(1.00×)", "(-)", ""}},
	} {
		ts := fairRaceTargets(100, tc.lehr, tc.peers)
		if len(ts) != len(tc.met) {
			t.Errorf("%s: got %d targets, want %d: %+v", tc.name, len(ts), len(tc.met), ts)
			continue
		}
		for i, tg := range ts {
			if tg.Met != tc.met[i] {
				t.Errorf("%s: target %q met = %v, want %v (%s)", tc.name, tg.Goal, tg.Met, tc.met[i], tg.Got)
			}
			if !strings.Contains(tg.Got, tc.got[i]) {
				t.Errorf("%s: target %q got %q, want it to contain %q", tc.name, tg.Goal, tg.Got, tc.got[i])
			}
		}
	}
}
