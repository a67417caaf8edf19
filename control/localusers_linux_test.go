package control_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Local accounts are not certificate users (issue 28, item 6): on
// control's unix socket the local account NAME is the identity
// unix:NAME — it does not publish to the domains of the certificate user
// NAME, nor is it a fleet admin because --fleet-admins names that user —
// unless the operator maps it (Options.LocalUsers, lehr control
// --local-users). ACLs and fleet admins name a local account as
// unix:NAME. The user control runs as, and root, stay fleet admins on the
// socket.
func TestLocalAccountsAreNotCertificateUsers(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// Two more local accounts, when this test may connect as them (it
	// runs as root): one named like a fleet admin's certificate, one
	// mapped to a certificate user.
	const twinUID, mappedUID = 4243, 4244
	twin, mapped := accountName(twinUID), accountName(mappedUID)

	ca, caKey, serverTLS, pool := mtlsSetup(t)
	sock := worldSocket(t)
	c := startSecure(t, control.Options{TLS: serverTLS, Socket: sock,
		FleetAdmins: []string{twin, "ops"},
		LocalUsers:  map[string]string{mapped: "ops"},
	})
	cert := func(name string) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, userCert(t, ca, caKey, name))))
	}
	local := dialSocket(t, sock, -1)
	publish := func(t *testing.T, cl lehrpb.ControlClient, ns string) *lehrpb.VersionInfo {
		t.Helper()
		resp, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: ns, Properties: []*lehrpb.Property{prop("k", "", "v")}})
		if err != nil {
			t.Fatalf("Publish(%s): %v", ns, err)
		}
		return resp.GetVersion()
	}
	asMe := cert(me.Username) // the certificate user named like the account running control

	// The certificate user's domain is not the local account's.
	if _, err := asMe.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "certs"}}); err != nil {
		t.Fatal(err)
	}
	_, err = local.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "certs/x", Properties: []*lehrpb.Property{prop("k", "", "local")}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `user "unix:`+me.Username+`"`) {
		t.Errorf("local %s publishing to the domain of certificate user %s: %v; want PERMISSION_DENIED for unix:%s", me.Username, me.Username, err, me.Username)
	}
	// Nor the other way round: what the local account creates is
	// unix:<account>'s.
	d, err := local.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "locals"}})
	if err != nil {
		t.Fatal(err)
	}
	wantLocal := "unix:" + me.Username
	if d.GetCreatedBy() != wantLocal || strings.Join(d.GetAcl().GetAdmins(), ",") != wantLocal {
		t.Errorf("domain created on the socket: by %q, admins %v; want %s", d.GetCreatedBy(), d.GetAcl().GetAdmins(), wantLocal)
	}
	if v := publish(t, local, "locals/x"); v.GetAuthor() != wantLocal || !strings.HasPrefix(v.GetTransportIdentity(), "unix:uid=") {
		t.Errorf("version by %q via %q; want %s via unix:uid=…", v.GetAuthor(), v.GetTransportIdentity(), wantLocal)
	}
	_, err = asMe.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "locals/x", Properties: []*lehrpb.Property{prop("k", "", "cert")}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied {
		t.Errorf("certificate user %s publishing to the domain of local %s: %v; want PERMISSION_DENIED", me.Username, wantLocal, err)
	}
	// An ACL names a local account as unix:<account>.
	if _, err := asMe.UpdateDomain(testCtx(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "certs", Acl: &lehrpb.Acl{Admins: []string{me.Username}, Publishers: []string{wantLocal}}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}); err != nil {
		t.Fatalf("naming %s in an ACL: %v", wantLocal, err)
	}
	publish(t, local, "certs/x")
	// Control's own account stays a fleet admin on its socket.
	if _, err := local.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-own"}); err != nil {
		t.Errorf("control's own account creating a zone: %v", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("the rest connects as other local accounts, which needs root")
	}
	// The local account named like the fleet admin certificate user twin
	// is not a fleet admin, and has no say in twin's domain.
	if _, err := cert(twin).CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "twins"}}); err != nil {
		t.Fatal(err)
	}
	lt := dialSocket(t, sock, twinUID)
	_, err = lt.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-twin"})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `"unix:`+twin+`"`) {
		t.Errorf("local %s creating a zone: %v; want PERMISSION_DENIED for unix:%s (the fleet admin is the certificate user)", twin, err, twin)
	}
	_, err = lt.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "twins/x", Properties: []*lehrpb.Property{prop("k", "", "twin")}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied {
		t.Errorf("local %s publishing to certificate user %s's domain: %v; want PERMISSION_DENIED", twin, twin, err)
	}
	// The mapped account is ops, as if it held ops's certificate: a fleet
	// admin, an admin of ops's domain, the author of what it publishes.
	if _, err := cert("ops").CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "opsdom"}}); err != nil {
		t.Fatal(err)
	}
	lm := dialSocket(t, sock, mappedUID)
	if _, err := lm.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-ops"}); err != nil {
		t.Errorf("local %s, mapped to ops, creating a zone: %v", mapped, err)
	}
	if v := publish(t, lm, "opsdom/x"); v.GetAuthor() != "ops" || !strings.Contains(v.GetTransportIdentity(), "uid="+strconv.Itoa(mappedUID)) {
		t.Errorf("version by %q via %q; want ops via the local uid %d", v.GetAuthor(), v.GetTransportIdentity(), mappedUID)
	}
	zs, err := local.ListZones(testCtx(t), &lehrpb.ListZonesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range zs.GetZones() {
		got = append(got, z.GetName())
	}
	if strings.Join(got, ",") != "zone-ops,zone-own" {
		t.Errorf("zones %v; want zone-ops and zone-own, not zone-twin", got)
	}
}

// The options that name identities are checked before anything starts.
func TestLocalUsersAreChecked(t *testing.T) {
	for _, bad := range []map[string]string{{"alice": "a b"}, {"": "alice"}, {"alice": "unix:bob"}, {"a b": "alice"}} {
		if _, err := control.New(control.Options{LocalUsers: bad}); !errors.Is(err, control.ErrIdentityOptions) {
			t.Errorf("New with LocalUsers %q: %v; want ErrIdentityOptions", bad, err)
		}
	}
	if _, err := control.New(control.Options{LocalUsers: map[string]string{"alice": "alice"}, FleetAdmins: []string{"alice", "unix:root"}}); err != nil {
		t.Errorf("New with a valid mapping and fleet admins: %v", err)
	}
}

// accountName is how control names the local account of uid.
func accountName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid-" + strconv.Itoa(uid)
}

// worldSocket returns a socket path every local account may reach.
func worldSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lehr-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "control.sock")
}

// dialSocket returns a client of control's socket that connects as the
// local account uid (-1: this process's own): the dialling thread alone
// takes uid as its effective uid for the connect, which is what
// SO_PEERCRED reports. Only root may; the test is skipped otherwise.
func dialSocket(t *testing.T, sock string, uid int) lehrpb.ControlClient {
	t.Helper()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		if uid < 0 {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		return dialAsUID(sock, uid)
	}
	if uid >= 0 {
		conn, err := dialAsUID(sock, uid)
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot connect as uid %d: %v", uid, err)
		}
		if err != nil {
			t.Fatalf("connect as uid %d: %v", uid, err)
		}
		conn.Close()
	}
	conn, err := grpc.NewClient("passthrough:///control.sock", grpc.WithContextDialer(dialer), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return lehrpb.NewControlClient(conn)
}

// dialAsUID connects to sock with uid as the effective uid of the calling
// thread (setresuid on that thread only, not the process), then takes
// back the process's own.
func dialAsUID(sock string, uid int) (net.Conn, error) {
	runtime.LockOSThread()
	keep := uintptr(^uint32(0)) // -1: leave the id as it is
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); errno != 0 {
		runtime.UnlockOSThread()
		return nil, errno
	}
	conn, err := net.Dial("unix", sock)
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(os.Getuid()), keep); errno != 0 {
		// The thread stays locked, and ends with this goroutine.
		return nil, fmt.Errorf("take back uid %d: %w", os.Getuid(), errno)
	}
	runtime.UnlockOSThread()
	return conn, err
}
