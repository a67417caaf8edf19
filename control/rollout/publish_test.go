package rollout_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control/rollout"
	"lehr.dev/lehr/proto/lehrpb"
)

// AtPublish starts at publish exactly the global blasts Start would enter
// at once, as Start starts them plus one event; everything else is left
// to the strategist without reading anything.
func TestAtPublish(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	const ns = "pay/limits"
	zones := []string{"a", "b"}
	at := func(v uint64) map[string]*lehrpb.GoalState {
		out := map[string]*lehrpb.GoalState{}
		for _, z := range zones {
			out[z] = &lehrpb.GoalState{Zone: z, Namespace: ns, Version: v}
		}
		return out
	}
	// Version 2's staged rollout in flight from base 1: zone a moved, b
	// with a candidate.
	inFlight := &lehrpb.Rollout{Id: ns + "@2", Namespace: ns, Version: 2, BaseVersion: 1, State: lehrpb.RolloutState_ROLLOUT_STATE_RUNNING,
		Policy: rollout.Default(), StageStartTime: timestamppb.New(now.Add(-time.Hour)), EventCount: 4}
	movedA := at(1)
	movedA["a"] = &lehrpb.GoalState{Zone: "a", Namespace: ns, Version: 2}
	open := []*lehrpb.FreezeWindow{{Start: timestamppb.New(now.Add(-time.Minute)), End: timestamppb.New(now.Add(time.Hour))}}
	closed := []*lehrpb.FreezeWindow{{Start: timestamppb.New(now.Add(-time.Hour)), End: timestamppb.New(now.Add(-time.Minute))}}
	staged := &lehrpb.RolloutPolicy{Stages: []*lehrpb.RolloutStage{{Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{}}, Bake: durationpb.New(time.Minute)}}}
	for _, tc := range []struct {
		name   string
		policy *lehrpb.RolloutPolicy
		seq    uint64
		zones  []string
		goals  map[string]*lehrpb.GoalState
		prev   *lehrpb.Rollout
		ok     bool
		read   bool // whether it reads the goals
		base   uint64
	}{
		{name: "global blast", policy: rollout.GlobalBlast(), seq: 2, zones: zones, goals: at(1), ok: true, read: true, base: 1},
		{name: "global blast after a finished rollout", policy: rollout.GlobalBlast(), seq: 3, zones: zones, goals: at(2),
			prev: &lehrpb.Rollout{Id: ns + "@2", Namespace: ns, Version: 2, BaseVersion: 1, State: lehrpb.RolloutState_ROLLOUT_STATE_SUCCEEDED}, ok: true, read: true, base: 2},
		{name: "global blast superseding a rollout in flight", policy: rollout.GlobalBlast(), seq: 3, zones: zones, goals: movedA, prev: inFlight, ok: true, read: true, base: 1},
		{name: "global blast, a freeze window closed", policy: &lehrpb.RolloutPolicy{GlobalBlast: true, FreezeWindows: closed}, seq: 2, zones: zones, goals: at(1), ok: true, read: true, base: 1},
		{name: "global blast, every zone there already", policy: rollout.GlobalBlast(), seq: 2, zones: zones, goals: at(2), read: true},
		{name: "global blast, a freeze window open", policy: &lehrpb.RolloutPolicy{GlobalBlast: true, FreezeWindows: open}, seq: 2, zones: zones},
		{name: "global blast under max_concurrent", policy: &lehrpb.RolloutPolicy{GlobalBlast: true, MaxConcurrent: 3}, seq: 2, zones: zones},
		// Its alerts are read by the strategist (Admit), never by a publish.
		{name: "global blast with a monitoring check", policy: &lehrpb.RolloutPolicy{GlobalBlast: true,
			Monitoring: &lehrpb.MonitoringCheck{Alerts: []*lehrpb.AlertSelector{{Alert: "Overloaded"}}}}, seq: 2, zones: zones},
		{name: "global blast, first version", policy: rollout.GlobalBlast(), seq: 1, zones: zones},
		{name: "global blast, no zone", policy: rollout.GlobalBlast(), seq: 2},
		{name: "staged", policy: staged, seq: 2, zones: zones},
		{name: "the default", policy: rollout.Default(), seq: 2, zones: zones},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := &lehrpb.VersionInfo{Namespace: ns, Seq: tc.seq, Checksum: "sha256:new", Source: lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT}
			read := false
			in := rollout.PublishInput{Info: info, Zones: tc.zones, Policy: tc.policy, Source: lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN,
				Generation: 7, Now: now,
				Read: func() (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error) {
					read = true
					return tc.goals, proto.CloneOf(tc.prev), nil
				}}
			d, ok, err := rollout.AtPublish(in)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || read != tc.read {
				t.Fatalf("ok %v, read %v; want %v, %v", ok, read, tc.ok, tc.read)
			}
			if !ok {
				return
			}
			// As Start decides it, with one event more.
			want, err := rollout.Start(rollout.StartInput{
				Head: &lehrpb.Namespace{Name: ns, LatestVersion: tc.seq, LatestChecksum: "sha256:new"}, Prev: proto.CloneOf(tc.prev),
				Goals: tc.goals, Zones: tc.zones, Now: now,
				Latest: func() (*lehrpb.VersionInfo, error) { return info, nil },
				Policy: func() (*lehrpb.RolloutPolicy, lehrpb.RolloutPolicySource, uint64, error) {
					return tc.policy, lehrpb.RolloutPolicySource_ROLLOUT_POLICY_SOURCE_DOMAIN, 7, nil
				},
				ExpectedChecks: func() ([]*lehrpb.CanaryCheck, error) { return nil, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			r, evs := d.Started.Rollout, d.Started.Events
			last := evs[len(evs)-1]
			if last.GetKind() != rollout.PublishedEventKind || last.GetSeq() != r.GetEventCount() ||
				last.GetMessage() != fmt.Sprintf("goals written at publish: every zone at once (2 zone(s)), in version %d's own transaction", tc.seq) {
				t.Errorf("last event %v; want the published event, numbered last", last)
			}
			w := want.Started
			w.Rollout.EventCount++
			if diff := cmp.Diff(w.Rollout, r, protocmp.Transform()); diff != "" {
				t.Errorf("rollout differs from Start's (-Start +AtPublish):\n%s", diff)
			}
			if diff := cmp.Diff(w.Events, evs[:len(evs)-1], protocmp.Transform()); diff != "" {
				t.Errorf("events differ from Start's (-Start +AtPublish):\n%s", diff)
			}
			if diff := cmp.Diff(w.Goals, d.Started.Goals, protocmp.Transform()); diff != "" {
				t.Errorf("goals differ from Start's (-Start +AtPublish):\n%s", diff)
			}
			if diff := cmp.Diff(want.Superseded, d.Superseded, protocmp.Transform()); diff != "" {
				t.Errorf("superseded differs from Start's (-Start +AtPublish):\n%s", diff)
			}
			if (d.Superseded != nil) != rollout.Active(tc.prev) {
				t.Errorf("superseded %v with the previous rollout %v", d.Superseded, tc.prev.GetState())
			}
			if r.GetBaseVersion() != tc.base || r.GetStage() != 0 || r.GetStageStartTime() == nil || r.GetState() != lehrpb.RolloutState_ROLLOUT_STATE_RUNNING {
				t.Errorf("rollout %v; want running in stage 0 from base %d", r, tc.base)
			}
			var moved []string
			for _, g := range d.Started.Goals {
				if g.GetVersion() == tc.seq && g.GetCandidate() == nil {
					moved = append(moved, g.GetZone())
				}
			}
			if !slices.Equal(moved, tc.zones) {
				t.Errorf("goals move %v to version %d, want every zone %v", moved, tc.seq, tc.zones)
			}
		})
	}

	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		_, ok, err := rollout.AtPublish(rollout.PublishInput{Info: &lehrpb.VersionInfo{Namespace: ns, Seq: 2}, Zones: zones, Policy: rollout.GlobalBlast(), Now: now,
			Read: func() (map[string]*lehrpb.GoalState, *lehrpb.Rollout, error) { return nil, nil, boom }})
		if ok || !errors.Is(err, boom) {
			t.Errorf("ok %v, err %v; want false, the read's error", ok, err)
		}
	})
}
