package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// newBare returns a Service whose store has no etcd client: enough for
// logic that makes no etcd request.
func newBare(t *testing.T) *Service {
	t.Helper()
	s, err := New(Options{Store: store.New(nil, store.Options{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAPIErrorMapsStoreErrors(t *testing.T) {
	s := newBare(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		err       error
		code      codes.Code
		retryable bool
	}{
		{"invalid", fmt.Errorf("store: put: %w: too big", store.ErrInvalid), codes.InvalidArgument, false},
		{"contention", fmt.Errorf("store: commit x/y: %w after 16 attempts", store.ErrContention), codes.Aborted, false},
		{"not found", &store.NotFoundError{What: "zone", Name: "z"}, codes.NotFound, false},
		{"already exists", fmt.Errorf("store: create zone z: %w", store.ErrAlreadyExists), codes.AlreadyExists, false},
		{"unavailable", fmt.Errorf("store: get: %w", context.DeadlineExceeded), codes.Unavailable, true},
		{"revision gone", store.ErrRevisionGone, codes.OutOfRange, false},
		{"corrupt", store.ErrCorrupt, codes.DataLoss, false},
		{"other", errors.New("boom"), codes.Internal, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := s.apiError(ctx, tc.err)
			if e.Code != tc.code || e.Retryable() != tc.retryable {
				t.Errorf("apiError(%v) = %v (retryable %v); want %v (retryable %v)", tc.err, e, e.Retryable(), tc.code, tc.retryable)
			}
			if e.Message == "" {
				t.Errorf("apiError(%v) has no message", tc.err)
			}
		})
	}
}

func TestCheckReport(t *testing.T) {
	ok := func() *lehrpb.ReportZoneStatusRequest {
		return &lehrpb.ReportZoneStatusRequest{Zone: "z", DistributorId: "d", Agents: 1,
			Versions: []*lehrpb.VersionCount{{Namespace: "a/b", Version: 1, Agents: 1}, {Namespace: "a/b", Version: 2}}}
	}
	for _, tc := range []struct {
		name  string
		edit  func(r *lehrpb.ReportZoneStatusRequest)
		field string // "" means valid
	}{
		{"valid", func(*lehrpb.ReportZoneStatusRequest) {}, ""},
		{"version 0 counts agents that hold nothing", func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions = append(r.Versions, &lehrpb.VersionCount{Namespace: "a/c", Version: 0, Agents: 1})
		}, ""},
		{"max ttl", func(r *lehrpb.ReportZoneStatusRequest) { r.TtlSeconds = MaxReportTTLSeconds }, ""},
		{"longest id", func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorId = string(make([]byte, 128)) }, ""},
		{"empty zone", func(r *lehrpb.ReportZoneStatusRequest) { r.Zone = "" }, "zone"},
		{"zone with slash", func(r *lehrpb.ReportZoneStatusRequest) { r.Zone = "a/b" }, "zone"},
		{"empty id", func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorId = "" }, "distributor_id"},
		{"id too long", func(r *lehrpb.ReportZoneStatusRequest) { r.DistributorId = string(make([]byte, 129)) }, "distributor_id"},
		{"negative agents", func(r *lehrpb.ReportZoneStatusRequest) { r.Agents = -5 }, "agents"},
		{"ttl over max", func(r *lehrpb.ReportZoneStatusRequest) { r.TtlSeconds = MaxReportTTLSeconds + 1 }, "ttl_seconds"},
		{"bad namespace", func(r *lehrpb.ReportZoneStatusRequest) { r.Versions[1].Namespace = "A/b" }, "versions[1].namespace"},
		{"negative count", func(r *lehrpb.ReportZoneStatusRequest) { r.Versions[0].Agents = -1 }, "versions[0].agents"},
		{"duplicate", func(r *lehrpb.ReportZoneStatusRequest) { r.Versions[1].Version = 1 }, "versions[1]"},
		{"too many", func(r *lehrpb.ReportZoneStatusRequest) {
			r.Versions = make([]*lehrpb.VersionCount, MaxVersionCounts+1)
		}, "versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.edit(r)
			err := checkReport(r)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("checkReport = %v, want nil", err)
				}
				return
			}
			e := apierror.FromError(err)
			if err == nil || e.Code != codes.InvalidArgument || e.Field != tc.field {
				t.Fatalf("checkReport = %v, want InvalidArgument on %q", err, tc.field)
			}
		})
	}
}

func TestSumVersions(t *testing.T) {
	vc := func(ns string, v uint64, n int32) *lehrpb.VersionCount {
		return &lehrpb.VersionCount{Namespace: ns, Version: v, Agents: n}
	}
	got := sumVersions([]*lehrpb.DistributorStatus{
		{DistributorId: "a", Versions: []*lehrpb.VersionCount{vc("b/x", 2, 1), vc("a/x", 10, 2), vc("a/x", 9, 1)}},
		{DistributorId: "b", Versions: []*lehrpb.VersionCount{vc("a/x", 10, 3), vc("b/x", 2, math.MaxInt32)}},
		{DistributorId: "c"},
	})
	want := []*lehrpb.VersionCount{vc("a/x", 9, 1), vc("a/x", 10, 5), vc("b/x", 2, math.MaxInt32)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("sumVersions (-want +got):\n%s", diff)
	}
	if got := sumVersions(nil); len(got) != 0 {
		t.Errorf("sumVersions(nil) = %v, want empty", got)
	}

	// Consumers and their services add up across distributors; the
	// services are listed most consumers first, at most services.Max.
	svc := func(name string, n uint32) *lehrpb.ServiceConsumers {
		return &lehrpb.ServiceConsumers{Service: name, Consumers: n}
	}
	var many []*lehrpb.ServiceConsumers
	for i := range 16 {
		many = append(many, svc(fmt.Sprintf("s%02d", i), 1))
	}
	got = sumVersions([]*lehrpb.DistributorStatus{
		{DistributorId: "a", Versions: []*lehrpb.VersionCount{{Namespace: "a/x", Version: 1, Agents: 2, Consumers: 5,
			Services: []*lehrpb.ServiceConsumers{svc("api", 3), svc("web", 1)}}}},
		{DistributorId: "b", Versions: []*lehrpb.VersionCount{{Namespace: "a/x", Version: 1, Agents: 30, Consumers: 40,
			Services: append([]*lehrpb.ServiceConsumers{svc("web", 20)}, many...)}}},
	})
	wantSvcs := append([]*lehrpb.ServiceConsumers{svc("web", 21), svc("api", 3)}, many[:14]...)
	want = []*lehrpb.VersionCount{{Namespace: "a/x", Version: 1, Agents: 32, Consumers: 45, Services: wantSvcs}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("sumVersions with services (-want +got):\n%s", diff)
	}
}

func TestReportLeasesSweep(t *testing.T) {
	var r reportLeases
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := reportKey{"z", "a"}, reportKey{"z", "b"}
	r.set(a, store.ReportLease{ID: 1, TTL: 10 * time.Second}, t0)
	r.set(b, store.ReportLease{ID: 2, TTL: 5 * time.Minute}, t0)
	if got := r.get(a); got.ID != 1 {
		t.Fatalf("get(a) = %+v, want lease 1", got)
	}
	// Before the next sweep nothing is dropped, even if expired.
	r.set(b, store.ReportLease{ID: 2, TTL: 5 * time.Minute}, t0.Add(30*time.Second))
	if got := r.get(a); got.ID != 1 {
		t.Fatalf("get(a) before the sweep = %+v, want lease 1", got)
	}
	// The sweep drops a (expired), keeps b (renewed).
	r.set(b, store.ReportLease{ID: 2, TTL: 5 * time.Minute}, t0.Add(leaseSweepInterval+time.Second))
	if got, n := r.get(a), r.len(); got.ID != 0 || n != 1 {
		t.Errorf("after the sweep get(a) = %+v, len %d; want none and 1", got, n)
	}
	// A zero lease forgets the key.
	r.set(b, store.ReportLease{}, t0.Add(leaseSweepInterval+2*time.Second))
	if n := r.len(); n != 0 {
		t.Errorf("len after forgetting b = %d, want 0", n)
	}
}

func TestWithFieldAndInvalidOn(t *testing.T) {
	for _, tc := range []struct {
		code              codes.Code
		preset            string
		withField, onlyIn string
	}{
		{codes.InvalidArgument, "", "f", "f"},
		{codes.NotFound, "", "f", ""},
		{codes.AlreadyExists, "", "f", ""},
		{codes.Unavailable, "", "", ""},
		{codes.Aborted, "", "", ""},
		{codes.InvalidArgument, "kept", "kept", "kept"},
	} {
		e := withField(apierror.New(tc.code, "", tc.preset, "x"), "f")
		if e.Field != tc.withField {
			t.Errorf("withField(%v with field %q) set field %q, want %q", tc.code, tc.preset, e.Field, tc.withField)
		}
		e = invalidOn(apierror.New(tc.code, "", tc.preset, "x"), "f")
		if e.Field != tc.onlyIn {
			t.Errorf("invalidOn(%v with field %q) set field %q, want %q", tc.code, tc.preset, e.Field, tc.onlyIn)
		}
	}
}
