package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/aclements/go-moremath/stats"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/canary/scenario"
)

func canaryScenario() Scenario {
	return Scenario{
		Name:  "canary",
		Title: "canary judges on seeded realistic fleets: bad changes caught, good changes failed — Lehr vs a Kayenta-style Mann-Whitney judge (issue 10)",
		Run:   runCanaryBench,
	}
}

var (
	canaryPhis     = []float64{0, 0.5, 0.8, 0.95}
	canaryCanaries = []int{1, 3, 10}
	canarySpreads  = []float64{0.1, 0.3}
)

// canaryCell is one kind of fleet: a change, an autocorrelation, a number
// of canary hosts, and whether the fleet serves without errors.
type canaryCell struct {
	change   scenario.Change
	phi      float64
	canaries int
	zero     bool
	spread   float64 // host-to-host log-sd
}

// canaryTally counts failures of each judge over a cell's fleets: Lehr's
// population judge, its host-level checks (a fleet fails when any canary
// host's own check fails) and the Kayenta-style judge.
type canaryTally struct {
	fleets, lehr, host, kayenta int
	learned                     int // Lehr's judge with the cell's learned history
}

// canaryHistory is how many good changes of a cell's fleet spec (other
// seeds) the "learned" judge learns from before judging: between
// canary.MinHistory and canary.MaxHistory.
const canaryHistory = 40

func runCanaryBench(ctx context.Context, e *Env) (*Result, error) {
	seeds := pick(e.Profile, 5, 100, 1000)
	var cells []canaryCell
	for _, ch := range scenario.Changes {
		for _, phi := range canaryPhis {
			for _, n := range canaryCanaries {
				for _, sp := range canarySpreads {
					cells = append(cells, canaryCell{ch, phi, n, false, sp})
					if ch == scenario.Good {
						cells = append(cells, canaryCell{ch, phi, n, true, sp})
					}
				}
			}
		}
	}
	tallies := make([]canaryTally, len(cells))
	memo := &histories{m: map[histKey]*histEntry{}}
	work := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				t, err := judgeCell(cells[i], seeds, memo)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				tallies[i] = t
			}
		}()
	}
	for i := range cells {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	res := &Result{
		Setup: fmt.Sprintf("%d seeded fleets per cell (canary/scenario): 20 control hosts, 60 intervals before the change and a 30-interval bake, "+
			"host-to-host differences of log-sd 0.1 or 0.3 (error ratios twice that), AR(1) noise per host at φ ∈ {0, 0.5, 0.8, 0.95}, a shared traffic trend and (half the fleets) a fleet-wide incident, "+
			"1, 3 or 10 canary hosts; good changes also on zero-error fleets; bad changes are the six of canary/scenario, mild ones (error ratio ×2, latency +20 %%) are reported apart. Lehr: canary.Judge with the default checks, 4 looks over the bake, α = 0.01 per judgement "+
			"(the verdict a rollout polling every interval would get). Lehr learned: the same judge with the history control would have learned of the cell's fleets "+
			"(docs/canary.md, \"Learning from history\"): %d good changes of the same fleet spec, other seeds, judged first, the samples of those that passed kept. Lehr host-level: what the agents judge locally, canary.JudgeHost on each canary host alone "+
			"(its own 60 intervals before against the bake, no control hosts, one look per interval, α = 0.001 per host), the fleet failing if any canary host fails: "+
			"evidence shown beside the verdict, never deciding it. Kayenta-style: per metric (error ratio, latency, requests, restarts), the canary hosts' and the "+
			"control hosts' aggregate series over the bake compared by a two-sided Mann-Whitney U test at 95 %% confidence (Kayenta's default), failing in the bad "+
			"direction; a fleet fails if any metric fails; judged once at the end of the bake.", seeds, canaryHistory),
	}
	sum := func(judge string, keep func(canaryCell) bool) (fails, fleets int) {
		for i, c := range cells {
			if keep(c) {
				fleets += tallies[i].fleets
				switch judge {
				case "lehr":
					fails += tallies[i].lehr
				case "lehr host-level":
					fails += tallies[i].host
				case "lehr learned":
					fails += tallies[i].learned
				default:
					fails += tallies[i].kayenta
				}
			}
		}
		return fails, fleets
	}
	pct := func(f, n int) float64 {
		if n == 0 {
			return math.NaN()
		}
		return 100 * float64(f) / float64(n)
	}
	for _, judge := range []string{"lehr", "lehr learned", "lehr host-level", "kayenta-style"} {
		for _, ch := range scenario.Changes {
			for _, zero := range []bool{false, true} {
				if zero && ch != scenario.Good {
					continue
				}
				name := ch.String()
				if zero {
					name += " (zero-error fleet)"
				}
				row := Row{System: judge, Case: name}
				for _, phi := range canaryPhis {
					f, n := sum(judge, func(c canaryCell) bool { return c.change == ch && c.zero == zero && c.phi == phi })
					row.Add(fmt.Sprintf("failed φ=%.2g", phi), pct(f, n), "%")
				}
				for _, k := range canaryCanaries {
					f, n := sum(judge, func(c canaryCell) bool { return c.change == ch && c.zero == zero && c.canaries == k })
					row.Add(fmt.Sprintf("failed %d canary", k), pct(f, n), "%")
				}
				f, n := sum(judge, func(c canaryCell) bool { return c.change == ch && c.zero == zero })
				row.Add("failed", pct(f, n), "%")
				res.Rows = append(res.Rows, row)
			}
		}
		bad := func(c canaryCell) bool { return c.change != scenario.Good && !c.change.Mild() }
		mild := func(c canaryCell) bool { return c.change.Mild() }
		good := func(c canaryCell) bool { return c.change == scenario.Good }
		for _, sp := range canarySpreads {
			bf, bn := sum(judge, func(c canaryCell) bool { return bad(c) && c.spread == sp })
			mf, mn := sum(judge, func(c canaryCell) bool { return mild(c) && c.spread == sp })
			gf, gn := sum(judge, func(c canaryCell) bool { return good(c) && c.spread == sp })
			row := Row{System: judge, Case: fmt.Sprintf("overall, host spread %.1f", sp)}
			row.Add("bad caught", pct(bf, bn), "%").Add("mild caught", pct(mf, mn), "%").Add("good failed", pct(gf, gn), "%").Add("fleets", float64(bn+mn+gn), "")
			res.Rows = append(res.Rows, row)
		}
		bf, bn := sum(judge, bad)
		mf, mn := sum(judge, mild)
		gf, gn := sum(judge, good)
		row := Row{System: judge, Case: "overall"}
		row.Add("bad caught", pct(bf, bn), "%").Add("mild caught", pct(mf, mn), "%").Add("good failed", pct(gf, gn), "%").Add("fleets", float64(bn+mn+gn), "")
		res.Rows = append(res.Rows, row)
		if judge == "lehr" {
			res.Targets = append(res.Targets,
				Target{Goal: "bad changes caught ≥ 98 %", Got: fmt.Sprintf("%.1f %% of %d", pct(bf, bn), bn), Met: pct(bf, bn) >= 98},
				Target{Goal: "good changes failed ≤ 0.5 %", Got: fmt.Sprintf("%.2f %% of %d", pct(gf, gn), gn), Met: pct(gf, gn) <= 0.5},
				Target{Goal: "mild bad changes caught ≥ 80 %", Got: fmt.Sprintf("%.1f %% of %d", pct(mf, mn), mn), Met: pct(mf, mn) >= 80})
		}
		if judge == "lehr learned" {
			base, _ := sum("lehr", bad)
			res.Targets = append(res.Targets,
				Target{Goal: "learned from history: good changes failed ≤ 0.5 %", Got: fmt.Sprintf("%.2f %% of %d", pct(gf, gn), gn), Met: pct(gf, gn) <= 0.5},
				Target{Goal: "learned from history: bad changes caught ≥ without", Got: fmt.Sprintf("%.1f %% (without: %.1f %%) of %d", pct(bf, bn), pct(base, bn), bn), Met: bf >= base})
		}
	}
	res.Notes = append(res.Notes,
		"The fleets come from our own generator (canary/scenario); the numbers say how the judges behave on it, not on every fleet. `lehr canary generate` writes any of them for inspection.",
		"Host-level checks cannot tell a canary host's change from a fleet-wide incident that hits it at the same time, and with 10 canary hosts the chance that one of them fails alone adds up: their false failures are the price of judging without control hosts, which is why they are evidence beside the population verdict and never decide a rollout (docs/canary.md, \"Host-level checks\").",
		"The Kayenta-style judge is ours, written from Kayenta's documented method (Mann-Whitney on time points, canary vs baseline); it gets the whole control population as its baseline, which is less noisy than Kayenta's usual equal-sized baseline cluster.")
	return res, nil
}

func judgeCell(c canaryCell, seeds int, memo *histories) (canaryTally, error) {
	t := canaryTally{fleets: seeds}
	hist, err := memo.get(c)
	if err != nil {
		return t, err
	}
	for seed := range seeds {
		s := scenario.DefaultSpec(c.change, c.canaries, c.phi)
		s.ZeroErrors, s.HostSpread = c.zero, c.spread
		in := scenario.Generate(s, uint64(seed)+uint64(1000*c.canaries)+uint64(100000*int(c.change))+uint64(1e7*c.phi)+uint64(1e9*c.spread))
		r, err := canary.Judge(in, canary.Options{BakeIntervals: s.After})
		if err != nil {
			return t, fmt.Errorf("canary bench: %v: %w", c.change, err)
		}
		if r.Verdict == canary.Fail {
			t.lehr++
		}
		in.History = hist
		r, err = canary.Judge(in, canary.Options{BakeIntervals: s.After})
		if err != nil {
			return t, fmt.Errorf("canary bench, learned: %v: %w", c.change, err)
		}
		if r.Verdict == canary.Fail {
			t.learned++
		}
		in.History = nil
		for _, ms := range in.Canary {
			h, err := canary.JudgeHost(canary.HostInput{Interval: in.Interval, ChangeIndex: in.ChangeIndex, Metrics: ms}, canary.HostOptions{BakeIntervals: s.After})
			if err != nil {
				return t, fmt.Errorf("canary bench, host-level: %v: %w", c.change, err)
			}
			if h.Verdict == canary.Fail {
				t.host++
				break
			}
		}
		if kayentaStyleFails(in) {
			t.kayenta++
		}
	}
	return t, nil
}

// histories learns each fleet spec's history once (learnCell): the cells
// of every change share their spec's good changes. Safe for concurrent
// use; the histories are read, never written, by the judge.
type histories struct {
	mu sync.Mutex
	m  map[histKey]*histEntry
}

type histKey struct {
	canaries    int
	phi, spread float64
	zeroErrors  bool
}

type histEntry struct {
	once sync.Once
	h    map[string]canary.History
	err  error
}

func (m *histories) get(c canaryCell) (map[string]canary.History, error) {
	k := histKey{c.canaries, c.phi, c.spread, c.zero || c.change == scenario.NewErrors}
	m.mu.Lock()
	e := m.m[k]
	if e == nil {
		e = &histEntry{}
		m.m[k] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.h, e.err = learnCell(c) })
	return e.h, e.err
}

// learnCell is what control would have learned of c's fleets before
// its change: canaryHistory good changes of the same fleet spec (other
// seeds, the fleet without errors when c's is) judged, the samples of those
// that passed kept, as control keeps those of completed rollouts.
func learnCell(c canaryCell) (map[string]canary.History, error) {
	s := scenario.DefaultSpec(scenario.Good, c.canaries, c.phi)
	s.ZeroErrors, s.HostSpread = c.zero || c.change == scenario.NewErrors, c.spread
	hist := map[string]canary.History{}
	for k := range canaryHistory {
		in := scenario.Generate(s, 1<<40+uint64(k)+uint64(1000*c.canaries)+uint64(1e7*c.phi)+uint64(1e9*c.spread))
		r, err := canary.Judge(in, canary.Options{BakeIntervals: s.After})
		if err != nil {
			return nil, fmt.Errorf("canary bench, history: %w", err)
		}
		if r.Verdict != canary.Pass {
			continue
		}
		for _, cr := range r.Checks {
			if cr.Sample != nil {
				h := hist[cr.Name]
				h.After = cr.Sample.After
				h.Samples = append(h.Samples, *cr.Sample)
				hist[cr.Name] = h
			}
		}
	}
	return hist, nil
}

// kayentaStyleFails judges in as Kayenta's Mann-Whitney classifier would
// with canary and baseline server groups: per metric, one aggregate value
// per interval for each group over the intervals after the change, the
// two samples compared as independent points.
func kayentaStyleFails(in canary.Input) bool {
	type metric struct {
		num, den  string
		higherBad bool
	}
	for _, m := range []metric{
		{canary.MetricRequestErrors, canary.MetricRequests, true},
		{canary.MetricRequestSeconds, canary.MetricRequestLatencyCount, true},
		{canary.MetricRequests, "", false},
		{canary.MetricProcessRestarts, "", true},
	} {
		a, b := groupSeries(in.Canary, m.num, m.den, in.ChangeIndex), groupSeries(in.Control, m.num, m.den, in.ChangeIndex)
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		r, err := stats.MannWhitneyUTest(a, b, stats.LocationDiffers)
		if err != nil || r.P >= 0.05 {
			continue // includes identical samples (all zero): no difference
		}
		if up := stats.Mean(a) > stats.Mean(b); up == m.higherBad {
			return true
		}
	}
	return false
}

// groupSeries aggregates a group of hosts interval by interval from index
// from on: Σ num / Σ den, or the mean of num per host without den.
func groupSeries(hosts map[string]map[string][]float64, num, den string, from int) []float64 {
	var out []float64
	for t := from; ; t++ {
		var n, d float64
		var any, more bool
		for _, ms := range hosts {
			v := ms[num]
			if t >= len(v) {
				continue
			}
			more = true
			if math.IsNaN(v[t]) {
				continue
			}
			w := 1.0
			if den != "" {
				w = ms[den][t]
			}
			n, d, any = n+v[t], d+w, true
		}
		if !more {
			return out
		}
		if any && d > 0 {
			out = append(out, n/d)
		}
	}
}
