package service

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/tap"

	"lehr.dev/lehr/internal/apierror"
)

// TestAdmissionSharesBetweenDomains: a domain that holds its share of the
// bytes in flight waits, then is refused as RATE_LIMITED (retryable);
// another domain is admitted at once meanwhile; released bytes let the
// waiting one in.
func TestAdmissionSharesBetweenDomains(t *testing.T) {
	a := NewAdmission(AdmissionOptions{Bytes: 100, DomainBytes: 50, Wait: 50 * time.Millisecond})
	ctx := t.Context()
	r1, err := a.acquire(ctx, "flood", 40)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.acquire(ctx, "flood", 40)
	if e := apierror.FromError(err); e.Code != codes.ResourceExhausted || !e.Retryable() {
		t.Fatalf("flood beyond its share: %v, want a retryable RESOURCE_EXHAUSTED", err)
	}
	start := time.Now()
	r2, err := a.acquire(ctx, "victim", 40)
	if err != nil || time.Since(start) > 40*time.Millisecond {
		t.Fatalf("victim while flood holds its share: %v after %v, want admitted at once", err, time.Since(start))
	}
	done := make(chan error, 1)
	go func() {
		r, err := a.acquire(context.Background(), "flood", 40)
		if err == nil {
			r()
		}
		done <- err
	}()
	r1()
	if err := <-done; err != nil {
		t.Fatalf("flood after its bytes were released: %v", err)
	}
	r2()
	// A call larger than a share runs, alone.
	r3, err := a.acquire(ctx, "big", 500)
	if err != nil {
		t.Fatalf("one call larger than a share: %v", err)
	}
	r3()
}

// TestAdmissionTapBoundsCalls: beyond Calls content calls at once, the
// next is refused before it is read; the count ends with each call.
func TestAdmissionTapBoundsCalls(t *testing.T) {
	a := NewAdmission(AdmissionOptions{Calls: 2})
	var ctxs []context.Context
	for range 2 {
		ctx, err := a.TapHandle(t.Context(), &tap.Info{FullMethodName: "/lehr.v1.Control/Publish"})
		if err != nil {
			t.Fatal(err)
		}
		ctxs = append(ctxs, ctx)
	}
	if _, err := a.TapHandle(t.Context(), &tap.Info{FullMethodName: "/lehr.v1.Control/Patch"}); apierror.FromError(err).Code != codes.ResourceExhausted {
		t.Fatalf("third content call: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := a.TapHandle(t.Context(), &tap.Info{FullMethodName: "/lehr.v1.Control/Rollback"}); err != nil {
		t.Fatalf("a rollback is not counted: %v", err)
	}
	a.StatsHandler().HandleRPC(ctxs[0], &stats.End{})
	if _, err := a.TapHandle(t.Context(), &tap.Info{FullMethodName: "/lehr.v1.Control/Publish"}); err != nil {
		t.Fatalf("after one call ended: %v", err)
	}
}
