package ha

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"lehr.dev/lehr/client/consumer"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/chaos"
)

// killEtcdLeader kills the etcd leader with SIGKILL, leaves it down for
// EtcdDown and starts it again.
func killEtcdLeader(ctx context.Context, r *run) error {
	e := r.s.Etcd
	var leader *Member
	var id uint64
	if err := pollEvery(ctx, 50*time.Millisecond, r.s.cfg.ConvergeBound, func() (err error) {
		leader, id, err = e.Leader(ctx)
		return err
	}); err != nil {
		return err
	}
	r.res.Fault = fmt.Sprintf("SIGKILL etcd %s (the leader), down %v, restarted", leader.Name, r.s.cfg.EtcdDown)
	r.t0 = time.Now()
	leader.Kill()
	if err := pollEvery(ctx, 20*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		if !e.HasLeader(ctx, map[uint64]bool{id: true}) {
			return fmt.Errorf("no etcd member follows a new leader")
		}
		return nil
	}); err != nil {
		return err
	}
	r.res.figure("kill → new etcd leader", time.Since(r.t0))
	if err := sleepUntil(ctx, r.t0.Add(r.s.cfg.EtcdDown)); err != nil {
		return err
	}
	if err := e.Start(ctx, leader); err != nil {
		return err
	}
	r.recovered = time.Now()
	return nil
}

// killStrategist waits until a rollout of the progressive namespace bakes
// its canary stage, kills the control replica leading the strategist with
// SIGKILL, leaves it down until the other replica leads, starts it again,
// and checks that the rollout completes: no stage entered twice, none
// skipped.
func killStrategist(ctx context.Context, r *run) error {
	bake := r.s.cfg.CanaryBake
	connected := r.s.connectedTo(ctx) // before: it takes a few seconds
	var ver uint64
	var ro *lehrpb.Rollout
	if err := pollEvery(ctx, 50*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		if ver = r.currentRollout(); ver == 0 {
			return fmt.Errorf("no rollout of %s under way", r.prog)
		}
		var err error
		if ro, err = r.rollout(ctx, ver); err != nil {
			return err
		}
		applied := ro.GetStageAppliedTime()
		if ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING || ro.GetStage() != 0 || applied == nil || len(ro.GetCanaryHosts()) == 0 {
			return fmt.Errorf("the rollout of %s@%d is %s at stage %d, not baking its canary", r.prog, ver, ro.GetState(), ro.GetStage())
		}
		// Mid-bake: a third of it gone, most of it left.
		if time.Since(applied.AsTime()) < bake/3 {
			return fmt.Errorf("the canary of %s@%d bakes since %v", r.prog, ver, applied.AsTime())
		}
		return nil
	}); err != nil {
		return err
	}
	applied := ro.GetStageAppliedTime().AsTime()
	leader, err := r.s.strategist(ctx)
	if err != nil {
		return err
	}
	victim := r.s.Cluster.Controls[leader]
	r.res.Fault = fmt.Sprintf("SIGKILL %s (the strategist) %v into the canary bake of %v, down until the other replica led, restarted",
		victim.Name, round(time.Since(applied)), bake)
	if connected == leader {
		r.res.note("%s was also the replica the distributor was connected to", victim.Name)
	}
	r.t0 = time.Now()
	victim.Kill()
	if err := pollEvery(ctx, 20*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		i, err := r.s.strategist(ctx)
		if err != nil {
			return err
		}
		if i == leader {
			return fmt.Errorf("%s still holds the election", victim.Name)
		}
		return nil
	}); err != nil {
		return err
	}
	takeover := time.Now()
	r.res.figure("kill → other replica leads the strategist", takeover.Sub(r.t0))
	if err := victim.Start(ctx); err != nil {
		return err
	}
	r.recovered = time.Now()

	// The rollout goes on where it stood.
	if err := pollEvery(ctx, 200*time.Millisecond, r.s.cfg.ConvergeBound, func() (err error) {
		if ro, err = r.rollout(ctx, ver); err != nil {
			return err
		}
		if !ended(ro.GetState()) {
			return fmt.Errorf("the rollout of %s@%d is %s at stage %d", r.prog, ver, ro.GetState(), ro.GetStage())
		}
		return nil
	}); err != nil {
		return err
	}
	if ro.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED {
		r.res.violate("the rollout of %s@%d the kill interrupted ended %s (%s), want SUCCEEDED", r.prog, ver, ro.GetState(), ro.GetReason())
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	evs, err := r.s.prod().RolloutEvents(ectx, r.prog, ver)
	cancel()
	if err != nil {
		return err
	}
	var stages []int32
	var kinds []string
	var advanced time.Time
	for _, ev := range evs {
		kinds = append(kinds, ev.GetKind())
		switch ev.GetKind() {
		case "stage":
			stages = append(stages, ev.GetStage())
		case "advanced":
			if ev.GetStage() == 0 && advanced.IsZero() {
				advanced = ev.GetTime().AsTime()
			}
		}
	}
	if fmt.Sprint(stages) != "[0 1]" {
		r.res.violate("the rollout of %s@%d entered stages %v (events %v), want [0 1]: each once, none skipped", r.prog, ver, stages, kinds)
	}
	if !advanced.IsZero() {
		r.res.figure("kill → canary stage advanced", advanced.Sub(r.t0))
		r.res.figure("canary applied → advanced", advanced.Sub(applied))
		// A bake started again by the new leader would end no earlier
		// than a whole bake after it took over.
		if advanced.Before(takeover.Add(bake)) {
			r.res.note("the canary bake resumed where it stood (advanced %v after the takeover; bake %v)", round(advanced.Sub(takeover)), bake)
		} else {
			r.res.note("the canary advanced %v after the takeover (bake %v): it may have baked again from the start", round(advanced.Sub(takeover)), bake)
		}
	}
	return nil
}

// loseQuorum kills two of the three etcd members (the leader and one
// other) with SIGKILL, checks half-way through the Outage that every
// agent still serves its consumers, then starts both again.
func loseQuorum(ctx context.Context, r *run) error {
	e := r.s.Etcd
	var leader *Member
	if err := pollEvery(ctx, 50*time.Millisecond, r.s.cfg.ConvergeBound, func() (err error) {
		leader, _, err = e.Leader(ctx)
		return err
	}); err != nil {
		return err
	}
	down := []*Member{leader}
	for _, m := range e.Members {
		if m != leader && len(down) < 2 {
			down = append(down, m)
		}
	}
	r.res.Fault = fmt.Sprintf("SIGKILL etcd %s (the leader) and %s: no quorum for %v, both restarted", down[0].Name, down[1].Name, r.s.cfg.Outage)
	r.t0 = time.Now()
	for _, m := range down {
		m.Kill()
	}
	probe := make(chan string, 1)
	go func() { probe <- r.probeRead(ctx, r.t0.Add(time.Second)) }()
	if err := sleepUntil(ctx, r.t0.Add(r.s.cfg.Outage/2)); err != nil {
		return err
	}
	r.checkServing(ctx)
	if err := sleepUntil(ctx, r.t0.Add(r.s.cfg.Outage)); err != nil {
		return err
	}
	// At the end of the outage: control checks etcd every 2 s.
	var health []string
	for i, addr := range r.s.Cluster.ControlMetrics {
		health = append(health, fmt.Sprintf("%s %s", r.s.Cluster.Controls[i].Name, healthz(ctx, addr)))
	}
	r.res.note("control's /healthz at the end of the quorum loss: %s", strings.Join(health, ", "))

	restart := time.Now()
	started := make(chan error, 1)
	go func() { started <- e.Start(ctx, down...) }()
	err := pollEvery(ctx, 20*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		if !e.HasLeader(ctx, nil) {
			return fmt.Errorf("no etcd member has a leader")
		}
		return nil
	})
	if err != nil {
		<-started
		return err
	}
	r.quorumBack = time.Now()
	if err := <-started; err != nil {
		return err
	}
	r.res.note("%s", <-probe)
	r.recovered = time.Now()
	r.res.figure("restart → quorum back (a leader)", r.quorumBack.Sub(restart))
	acked := 0
	for _, op := range r.w.Ledger.Snapshot() {
		if op.Acked != nil && op.AckedAt.After(r.t0) && op.AckedAt.Before(r.quorumBack) {
			acked++
		}
	}
	r.res.note("%d writes acknowledged between the kill and the quorum's return (writes committed before the kill)", acked)
	return nil
}

// probeRead reads the global-blast namespace's metadata once, at the
// given time, with one plain call (no retries) and says how it went.
func (r *run) probeRead(ctx context.Context, at time.Time) string {
	if err := sleepUntil(ctx, at); err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	_, err := r.s.prod().RPC().GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: r.blast})
	took := round(time.Since(start))
	if err != nil {
		return fmt.Sprintf("a read issued %v into the quorum loss failed after %v: %v", round(at.Sub(r.t0)), took, status.Code(err))
	}
	return fmt.Sprintf("a read issued %v into the quorum loss was answered after %v", round(at.Sub(r.t0)), took)
}

// checkServing checks that a new consumer on every agent reads the
// global-blast namespace at the version the agent holds.
func (r *run) checkServing(ctx context.Context) {
	ok := 0
	for _, a := range r.s.Cluster.Agents {
		err := func() error {
			cl, err := consumer.New(consumer.Options{Socket: a.Socket(), FilesDir: a.FilesDir(), ClientID: "ha-outage-reader",
				RetryInterval: 200 * time.Millisecond, Logger: chaos.Quiet(r.s.log)})
			if err != nil {
				return err
			}
			defer cl.Close()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			sub, err := cl.Subscribe(sctx, r.blast)
			if err != nil {
				return err
			}
			st, err := a.Status(sctx)
			if err != nil {
				return err
			}
			held := uint64(0)
			for _, n := range st.GetNamespaces() {
				if n.GetNamespace() == r.blast {
					held = n.GetVersion()
				}
			}
			if v := sub.View().Version(); v == 0 || v != held {
				return fmt.Errorf("read version %d, the agent holds %d", v, held)
			}
			return nil
		}()
		if err != nil {
			r.res.violate("during the quorum loss, a new consumer on %s could not read %s: %v", a.HostID, r.blast, err)
			continue
		}
		ok++
	}
	r.res.note("during the quorum loss, new consumers read %s on %d of %d agents", r.blast, ok, len(r.s.Cluster.Agents))
}

// killConnectedControl kills the control replica the distributor is
// connected to with SIGKILL, leaves it down until the next write issued
// after the kill reached every consumer (at most FailoverBound), then
// starts it again.
func killConnectedControl(ctx context.Context, r *run) error {
	cl := r.s.Cluster
	var idx int
	if err := pollEvery(ctx, 100*time.Millisecond, r.s.cfg.ConvergeBound, func() error {
		if idx = r.s.connectedTo(ctx); idx < 0 {
			return fmt.Errorf("no control replica receives the distributor's reports")
		}
		return nil
	}); err != nil {
		return err
	}
	victim := cl.Controls[idx]
	if cl.DistributorControl == cl.ControlAddrs[idx] {
		r.res.note("the distributor was given %s's address alone (this lehr refuses a list of control addresses): it cannot fail over", victim.Name)
	}
	if s, err := r.s.strategist(ctx); err == nil && s == idx {
		r.res.note("%s also led the strategist", victim.Name)
	}
	r.t0 = time.Now()
	victim.Kill()
	err := pollEvery(ctx, 20*time.Millisecond, r.s.cfg.FailoverBound, func() error {
		if _, _, ok := nextUpdate(r.w.Ledger.Snapshot(), r.obs.Observations(), r.agents(), r.blast, r.t0, false); !ok {
			return fmt.Errorf("no write of %s issued after the kill reached every consumer", r.blast)
		}
		return nil
	})
	down := time.Since(r.t0)
	if err != nil {
		r.res.note("no update reached the consumers within %v of the kill: %s restarted then", r.s.cfg.FailoverBound, victim.Name)
	}
	r.res.Fault = fmt.Sprintf("SIGKILL %s (the distributor's), down %v, restarted", victim.Name, round(down))
	if err := victim.Start(ctx); err != nil {
		return err
	}
	r.recovered = time.Now()
	return nil
}

// connectedTo returns the index of the control replica receiving the
// distributor's zone reports (one a second), or -1: the one whose
// lehr_control_zone_reports_total grows.
func (s *Suite) connectedTo(ctx context.Context) int {
	before := s.zoneReports(ctx)
	if err := sleepUntil(ctx, time.Now().Add(2500*time.Millisecond)); err != nil {
		return -1
	}
	after := s.zoneReports(ctx)
	best, most := -1, 0.0
	for i := range after {
		if d := after[i] - before[i]; before[i] >= 0 && after[i] >= 0 && d > most {
			best, most = i, d
		}
	}
	return best
}

// zoneReports reads every replica's count of Zone's reports (-1 when it
// cannot be read).
func (s *Suite) zoneReports(ctx context.Context) []float64 {
	out := make([]float64, len(s.Cluster.ControlMetrics))
	var wg sync.WaitGroup
	for i, addr := range s.Cluster.ControlMetrics {
		wg.Go(func() { out[i] = metric(ctx, addr, `lehr_control_zone_reports_total{zone="`+Zone+`"}`) })
	}
	wg.Wait()
	return out
}

// metric reads one sample from the /metrics at addr: -1 if unreadable, 0
// if absent.
func metric(ctx context.Context, addr, name string) float64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	if sc.Err() != nil {
		return -1
	}
	return 0
}

// healthz returns the status line of GET /healthz at addr.
func healthz(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return resp.Status
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}
