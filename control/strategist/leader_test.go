package strategist

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/proto/lehrpb"
)

// lehr_control_strategist_leader is 1 on the one replica that leads and 0
// on the others, and a replica that stops leading counts no rollouts any
// more (its lehr_control_rollouts go to 0), so that alerts on them
// (deploy/prometheus, LehrRolloutStuck) read the leader's alone.
func TestLeaderGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/test/%s/%d/", t.Name(), time.Now().UnixNano())
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	type replica struct {
		set  *metrics.Set
		s    *Strategist
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(id string) *replica {
		cli, err := embedetcd.NewClient(ctx, etcdClient.Endpoints())
		if err != nil {
			t.Fatal(err)
		}
		st := store.New(cli, store.Options{Prefix: prefix, Logger: quiet})
		set := metrics.NewSet()
		s, err := New(Options{Store: st, Client: cli, ElectionKey: prefix + "strategist", ID: id, Interval: 20 * time.Millisecond,
			Logger: quiet, Metrics: set,
			Policy: func(context.Context, string) (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
				return nil, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_UNSPECIFIED, 0, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := &replica{set: set, s: s, stop: stop, done: make(chan struct{})}
		go func() { defer close(r.done); _ = s.Run(rctx) }()
		t.Cleanup(func() { stop(); <-r.done; cli.Close() })
		return r
	}
	has := func(r *replica, line string) bool {
		var b strings.Builder
		r.set.WritePrometheus(&b)
		return strings.Contains(b.String(), line+"\n")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	a := start("a")
	waitFor("a to lead", func() bool { return has(a, "lehr_control_strategist_leader 1") })
	// The leader counts rollouts by state each round; pretend it counted
	// one running, as a round over a domain with one would.
	a.s.setDomainStates("pay", map[lehrpb.RolloutState]int{lehrpb.RolloutState_ROLLOUT_STATE_RUNNING: 1})
	a.s.setStateGauges()
	b := start("b")
	time.Sleep(100 * time.Millisecond) // rounds of b, if it led
	if !has(b, "lehr_control_strategist_leader 0") {
		t.Errorf("b leads while a does")
	}
	a.stop()
	<-a.done
	waitFor("b to lead", func() bool { return has(b, "lehr_control_strategist_leader 1") })
	for _, line := range []string{"lehr_control_strategist_leader 0", `lehr_control_rollouts{state="running"} 0`} {
		if !has(a, line) {
			var all strings.Builder
			a.set.WritePrometheus(&all)
			t.Errorf("a, no longer leading, lacks %q:\n%s", line, all.String())
		}
	}
}
