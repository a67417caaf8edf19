package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// Replicas racing on a new store agree on one identity, made once and
// said to be made on an empty store; a later start reads it back; a store
// that already holds data when its identity is made (an upgrade) is not
// called empty.
func TestEnsureIdentity(t *testing.T) {
	ctx := testCtx(t)
	prefix := testPrefix(t)
	const racers = 4
	got := make([]Identity, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = newTestStore(t, Options{Prefix: prefix}).EnsureIdentity(ctx)
		}()
	}
	wg.Wait()
	made := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("EnsureIdentity %d: %v", i, errs[i])
		}
		if got[i].Store.GetId() != got[0].Store.GetId() || !got[i].Store.GetCreateTime().AsTime().Equal(got[0].Store.GetCreateTime().AsTime()) {
			t.Errorf("racer %d got %v, racer 0 %v; want one identity", i, got[i].Store, got[0].Store)
		}
		if got[i].Created {
			made++
			if !got[i].Empty {
				t.Errorf("the identity was made on a new store, but Empty is false")
			}
		} else if got[i].Empty {
			t.Errorf("racer %d did not make the identity but says the store was empty", i)
		}
	}
	if made != 1 {
		t.Errorf("%d racers made the identity, want 1", made)
	}
	if id := got[0].Store.GetId(); len(id) != 32 {
		t.Errorf("id %q, want 32 hex digits", id)
	}
	again, err := newTestStore(t, Options{Prefix: prefix}).EnsureIdentity(ctx)
	if err != nil || again.Created || again.Store.GetId() != got[0].Store.GetId() {
		t.Errorf("a later start: %+v, %v; want the same identity, not made again", again, err)
	}

	// A store of an earlier release: data, no identity.
	old := newTestStore(t, Options{})
	mustDomain(t, old, "pay")
	up, err := old.EnsureIdentity(ctx)
	if err != nil || !up.Created || up.Empty || up.Store.GetId() == got[0].Store.GetId() {
		t.Errorf("first start after an upgrade: %+v, %v; want a new identity made on a store that is not empty", up, err)
	}
}

// A registered replica is listed with when it last renewed its lease;
// stopping it removes it at once; a second replica cannot take a live
// replica's address, and takes it once that one is gone.
func TestRunReplica(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, Options{})
	start := timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	run := func(r *lehrpb.ControlReplica) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.RunReplica(rctx, r) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunReplica(%s): %v", r.GetAddress(), err)
			}
		}
	}
	list := func() []*lehrpb.ControlReplica {
		rs, err := s.Replicas(ctx)
		if err != nil {
			t.Fatalf("Replicas: %v", err)
		}
		return rs
	}
	stopA := run(&lehrpb.ControlReplica{Address: "a:7400", Version: "v1", StartTime: start})
	stopB := run(&lehrpb.ControlReplica{Address: "b:7400", Version: "v2", StartTime: start, EmbeddedEtcd: true})
	wait.For(t, "both replicas registered", func() bool { return len(list()) == 2 })
	rs := list()
	if rs[0].GetAddress() != "a:7400" || rs[1].GetAddress() != "b:7400" || rs[1].GetVersion() != "v2" || !rs[1].GetEmbeddedEtcd() ||
		!rs[0].GetStartTime().AsTime().Equal(start.AsTime()) {
		t.Errorf("replicas %v; want a:7400 then b:7400 as registered", rs)
	}
	for _, r := range rs {
		if age := time.Since(r.GetLastSeenTime().AsTime()); age < -time.Second || age > ReplicaTTL {
			t.Errorf("%s last seen %v ago; want within the lease's TTL", r.GetAddress(), age)
		}
	}

	// Another replica advertising a:7400 is not registered over it.
	stopA2 := run(&lehrpb.ControlReplica{Address: "a:7400", Version: "v3"})
	time.Sleep(300 * time.Millisecond)
	if rs := list(); rs[0].GetVersion() != "v1" {
		t.Errorf("a:7400 is %v; want the first replica's registration kept", rs[0])
	}
	stopA()
	wait.For(t, "the second a:7400 to register once the first stopped", func() bool {
		rs := list()
		return len(rs) == 2 && rs[0].GetVersion() == "v3"
	})
	stopA2()
	stopB()
	if rs := list(); len(rs) != 0 {
		t.Errorf("after both stopped: %v; want none (a stop revokes the lease)", rs)
	}

	if err := s.RunReplica(ctx, &lehrpb.ControlReplica{Address: "x/y:1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("RunReplica with a / in the address: %v, want ErrInvalid", err)
	}
}

// The election's leader is its oldest candidate; nobody campaigning is "".
func TestStrategistLeader(t *testing.T) {
	ctx := testCtx(t)
	s := newTestStore(t, Options{})
	key := s.Prefix() + "strategist"
	if got, err := s.StrategistLeader(ctx, key); err != nil || got != "" {
		t.Fatalf("StrategistLeader with no candidate: %q, %v; want \"\"", got, err)
	}
	for _, c := range []string{"first:1", "second:2"} {
		if _, err := shared.cli.Put(ctx, key+"/"+c, c); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.StrategistLeader(ctx, key); err != nil || got != "first:1" {
		t.Errorf("StrategistLeader: %q, %v; want first:1 (the oldest candidate)", got, err)
	}
	if _, err := shared.cli.Delete(ctx, key+"/first:1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.StrategistLeader(ctx, key); err != nil || got != "second:2" {
		t.Errorf("StrategistLeader after the leader left: %q, %v; want second:2", got, err)
	}
	st, err := s.EtcdStatus(ctx)
	if err != nil || len(st.GetMembers()) != 1 || st.GetLeader() != st.GetMembers()[0] || st.GetClusterId() == "" || st.GetVersion() == "" {
		t.Errorf("EtcdStatus: %v, %v; want one member, leading, with a cluster id and a version", st, err)
	}
}
