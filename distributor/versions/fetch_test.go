package versions_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

func TestFetchFromControl(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := srv.Client.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
	var props []*lehrpb.Property
	for i := range 100 {
		props = append(props, &lehrpb.Property{Key: fmt.Sprintf("k/%03d", i), Value: []byte(fmt.Sprint(i))})
	}
	pub, err := srv.Client.Publish(ctx, &lehrpb.PublishRequest{Namespace: "d/a", Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	v1 := pub.GetVersion()
	patch, err := srv.Client.Patch(ctx, &lehrpb.PatchRequest{
		Namespace: "d/a", BaseVersion: v1.GetSeq(),
		Set:    []*lehrpb.Property{{Key: "k/001", Value: []byte("changed")}, {Key: "new", Value: []byte("x")}},
		Delete: []string{"k/002"},
	})
	if err != nil {
		t.Fatal(err)
	}
	v2 := patch.GetVersion()

	c := versions.New(versions.Options{Client: srv.Client})
	got1, err := c.Get(ctx, "d/a", v1.GetSeq())
	if err != nil {
		t.Fatalf("Get v1: %v", err)
	}
	if got1.Checksum != v1.GetChecksum() || got1.Content.Checksum() != v1.GetChecksum() || got1.Content.Len() != 100 {
		t.Errorf("v1 = %d props checksum %s, want 100 props checksum %s", got1.Content.Len(), got1.Checksum, v1.GetChecksum())
	}
	got2, err := c.Get(ctx, "d/a", v2.GetSeq())
	if err != nil {
		t.Fatalf("Get v2: %v", err)
	}
	if got2.Content.Checksum() != v2.GetChecksum() {
		t.Errorf("v2 checksum %s, want %s", got2.Content.Checksum(), v2.GetChecksum())
	}
	want, err := srv.Client.Get(ctx, &lehrpb.GetRequest{Namespace: "d/a", Version: v2.GetSeq()})
	if err != nil {
		t.Fatal(err)
	}
	wantSnap, _ := content.New(content.FromProto(want.GetProperties()))
	if !got2.Content.Equal(wantSnap) {
		t.Errorf("v2 built from a delta differs from control's v2")
	}
	st := c.Stats()
	if st.Fetches != 1 || st.Deltas != 1 || st.ChecksumErrors != 0 {
		t.Errorf("stats = %+v, want 1 whole fetch and 1 delta", st)
	}
	// A second Get is served from memory.
	if _, err := c.Get(ctx, "d/a", v2.GetSeq()); err != nil {
		t.Fatal(err)
	}
	if st2 := c.Stats(); st2.Fetches != st.Fetches || st2.Deltas != st.Deltas {
		t.Errorf("a cached Get fetched again: %+v", st2)
	}
	// A version that does not exist is an error, and nothing is cached.
	if _, err := c.Get(ctx, "d/a", 99); err == nil {
		t.Error("Get of a missing version succeeded")
	}
	// Unreachable control: memory still serves, a fetch fails.
	srv.Stop()
	if _, err := c.Get(ctx, "d/a", v1.GetSeq()); err != nil {
		t.Errorf("cached Get with control down: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	c2 := versions.New(versions.Options{Client: lehrpb.NewControlClient(controltest.Dial(t, srv.Addr))})
	if _, err := c2.Get(short, "d/a", v1.GetSeq()); err == nil {
		t.Error("fetch with control down succeeded")
	}
}
