package control_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestStoreInvalidNamesField checks that an argument only the store can
// refuse (one zone more than it holds) reaches the client as
// INVALID_ARGUMENT on the request field, with the store's explanation, and
// changes nothing.
func TestStoreInvalidNamesField(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	for i := range store.MaxZones {
		if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: fmt.Sprintf("z%02d", i)}); err != nil {
			t.Fatalf("CreateZone #%d: %v", i, err)
		}
	}
	_, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "one-too-many"})
	e := apierror.FromError(err)
	if e.Code != codes.InvalidArgument || e.Field != "name" || e.Message == "" {
		t.Fatalf("CreateZone beyond %d zones = %v; want INVALID_ARGUMENT on name with a message", store.MaxZones, err)
	}
	if e.Retryable() {
		t.Errorf("%v is retryable; want not", e)
	}
	zs, err := cl.ListZones(testCtx(t), &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(zs.GetZones()); n != store.MaxZones {
		t.Errorf("%d zones after the rejected CreateZone, want %d", n, store.MaxZones)
	}
	// WatchGoals(create_zone) names its own field.
	stream, err := cl.WatchGoals(testCtx(t), &lehrpb.WatchGoalsRequest{Zone: "also-too-many", CreateZone: true})
	if err == nil {
		_, err = stream.Recv()
	}
	if e := apierror.FromError(err); e.Code != codes.InvalidArgument || e.Field != "zone" {
		t.Errorf("WatchGoals(create_zone) beyond %d zones = %v; want INVALID_ARGUMENT on zone", store.MaxZones, err)
	}
}
