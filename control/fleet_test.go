package control_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// startSecure runs control as a deployment does — not in dev mode — and
// returns it once it serves.
func startSecure(t *testing.T, opts control.Options) *control.Control {
	t.Helper()
	opts.DataDir, opts.Listen, opts.MetricsListen, opts.NoSync = t.TempDir(), "127.0.0.1:0", "off", true
	opts.Logger = controltest.Logger(t, slog.LevelWarn)
	c, err := control.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	t.Cleanup(func() { c.Close(); <-done })
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("control stopped: %v", err)
	case <-time.After(controltest.StartTimeout):
		t.Fatal("control not ready")
	}
	return c
}

// watchOnce opens a goal watch and returns the error of its first
// message (nil once the initial state arrived).
func watchOnce(t *testing.T, cl lehrpb.ControlClient, zone string, create bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	st, err := cl.WatchGoals(ctx, &lehrpb.WatchGoalsRequest{Zone: zone, CreateZone: create})
	if err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil || m.GetInitialComplete() {
			return err
		}
	}
}

// Zones are fleet-wide (issue 26): by default — no --fleet-admins — a
// user may not create one, by CreateZone or by a goal watch that asks to
// (create_zone), and the refusal says how fleet admins are named; a
// distributor still registers its own zone, the local user control runs
// as still creates zones on its socket, and a user may watch a zone that
// exists.
func TestZonesNeedAFleetAdminByDefault(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	sock := filepath.Join(t.TempDir(), "control.sock")
	c := startSecure(t, control.Options{TLS: serverTLS, Socket: sock})
	dial := func(id tlsconfig.Identity) lehrpb.ControlClient {
		cert := issueID(t, ca, caKey, id.Name, false, id.URI())
		return lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, cert)))
	}
	eve := dial(tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "eve"})
	dist := dial(tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-d", Name: "dist-d1"})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	local := lehrpb.NewControlClient(conn)

	refused := func(what string, err error) {
		t.Helper()
		e := apierror.FromError(err)
		if e == nil || e.Code != codes.PermissionDenied {
			t.Errorf("%s: %v; want PERMISSION_DENIED", what, err)
			return
		}
		for _, want := range []string{`user "eve"`, "zone-x", "--fleet-admins", "LEHR_FLEET_ADMINS", "no fleet admins are named"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("%s: %q; want it to say %q", what, e.Message, want)
			}
		}
	}
	_, err = eve.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-x"})
	refused("eve's CreateZone", err)
	refused("eve's goal watch with create_zone", watchOnce(t, eve, "zone-x", true))
	if err := watchOnce(t, dist, "zone-x", true); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.PermissionDenied {
		t.Errorf("a distributor of zone-d registering zone-x: %v; want PERMISSION_DENIED", err)
	}

	// The distributor registers its own zone; then anyone may watch it.
	if err := watchOnce(t, dist, "zone-d", true); err != nil {
		t.Errorf("the distributor of zone-d registering its zone: %v", err)
	}
	if err := watchOnce(t, eve, "zone-d", true); err != nil {
		t.Errorf("eve watching zone-d, which exists, with create_zone: %v", err)
	}
	// Control's own user on its socket is a fleet admin.
	if _, err := local.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-l"}); err != nil {
		t.Errorf("control's own user creating a zone on the socket: %v", err)
	}
	zs, err := local.ListZones(testCtx(t), &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range zs.GetZones() {
		got = append(got, z.GetName())
	}
	if want := []string{"zone-d", "zone-l"}; !slices.Equal(got, want) {
		t.Errorf("zones %v, want %v (nothing eve tried)", got, want)
	}
}

// Fleet admins are user names; a list that is not one is refused before
// anything starts.
func TestFleetAdminsAreUserNames(t *testing.T) {
	for _, bad := range [][]string{{"alice bob"}, {"ops", ""}, {"spiffe://lehr/user/ops"}} {
		if _, err := control.New(control.Options{FleetAdmins: bad}); err == nil || !strings.Contains(err.Error(), "fleet admin") {
			t.Errorf("New with FleetAdmins %q: %v; want an error naming the fleet admin", bad, err)
		}
	}
	if _, err := control.New(control.Options{FleetAdmins: []string{"ops", "alice@example.com"}}); err != nil {
		t.Errorf("New with valid fleet admins: %v", err)
	}
}

// Only fleet admins delete zones; a zone whose distributors report is
// deleted only with force; the deletion is audited and the zone's goals
// go with it.
func TestDeleteZone(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	sock := filepath.Join(t.TempDir(), "control.sock")
	c := startSecure(t, control.Options{TLS: serverTLS, Socket: sock})
	cert := issueID(t, ca, caKey, "eve", false, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "eve"}.URI())
	eve := lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, cert)))
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	admin := lehrpb.NewControlClient(conn) // control's own user on its socket
	for _, z := range []string{"zone-a", "zone-old"} {
		if _, err := admin.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: z}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eve.DeleteZone(testCtx(t), &lehrpb.DeleteZoneRequest{Name: "zone-old"}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.PermissionDenied {
		t.Errorf("eve deleting a zone: %v; want PERMISSION_DENIED", err)
	}
	if _, err := admin.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1"}); err == nil {
		t.Fatal("a local user reported zone status") // only distributors report; a distributor's report is made below
	}
	dcert := issueID(t, ca, caKey, "d1", false, tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "d1"}.URI())
	dist := lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, dcert)))
	if _, err := dist.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.DeleteZone(testCtx(t), &lehrpb.DeleteZoneRequest{Name: "zone-a"})
	if e := apierror.FromError(err); e == nil || e.Code != codes.FailedPrecondition || e.Reason != apierror.ReasonZoneInUse || !strings.Contains(e.Message, "--force") {
		t.Errorf("deleting a zone whose distributor reports: %v; want FAILED_PRECONDITION/ZONE_IN_USE saying --force", err)
	}
	if _, err := admin.DeleteZone(testCtx(t), &lehrpb.DeleteZoneRequest{Name: "zone-old"}); err != nil {
		t.Fatalf("the admin deleting zone-old: %v", err)
	}
	if _, err := admin.DeleteZone(testCtx(t), &lehrpb.DeleteZoneRequest{Name: "zone-a", Force: true}); err != nil {
		t.Fatalf("the admin deleting zone-a with force: %v", err)
	}
	zs, err := admin.ListZones(testCtx(t), &lehrpb.ListZonesRequest{})
	if err != nil || len(zs.GetZones()) != 0 {
		t.Errorf("zones after deleting both: %v, %v", zs.GetZones(), err)
	}
	recs, err := admin.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var deletes []string
	for _, r := range recs.GetRecords() {
		if r.GetMethod() == "DeleteZone" {
			deletes = append(deletes, r.GetTarget()+" "+r.GetCode())
		}
	}
	if !slices.Contains(deletes, "zone-old OK") || !slices.Contains(deletes, "zone-a OK") || len(deletes) < 4 {
		t.Errorf("audit records of DeleteZone: %v; want eve's refusal, the refusal without force and the two deletions", deletes)
	}
}
