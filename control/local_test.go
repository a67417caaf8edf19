package control_test

import (
	"context"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Outside dev mode control knows every caller that may change anything:
// plaintext loopback callers may only read, whatever author they assert;
// callers on the unix socket are the local account the kernel says they
// are (SO_PEERCRED), unix:<account> — the author of what they create, the
// admin of their domains, in the audit log — may not assert another
// author, and may not pose as distributors.
func TestLocalCallersAreIdentified(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "control.sock")
	c, err := control.New(control.Options{DataDir: dir, Listen: "127.0.0.1:0", MetricsListen: "off", Socket: sock, NoSync: true,
		Logger: controltest.Logger(t, slog.LevelWarn)})
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
	case <-time.After(2 * time.Minute):
		t.Fatal("control not ready")
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v, %v; want a socket of mode 0666", sock, fi.Mode(), err)
	}
	dial := func(target string) lehrpb.ControlClient {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return lehrpb.NewControlClient(conn)
	}
	tcp, local := dial(c.Addr().String()), dial("unix://"+sock)
	asMallory := metadata.AppendToOutgoingContext(testCtx(t), service.AuthorMetadataKey, "mallory")

	_, err = tcp.CreateDomain(asMallory, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, "may only read") {
		t.Fatalf("CreateDomain over plaintext TCP: %v; want PERMISSION_DENIED, read only", err)
	}
	if _, err := tcp.ListDomains(testCtx(t), &lehrpb.ListDomainsRequest{}); err != nil {
		t.Errorf("a read over plaintext TCP: %v", err)
	}

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	_, err = local.CreateDomain(asMallory, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || e.Field != service.AuthorMetadataKey || !strings.Contains(e.Message, "--as") {
		t.Errorf("CreateDomain over the socket as mallory: %v; want PERMISSION_DENIED: an identified caller asserts no other author", err)
	}
	mine := "unix:" + me.Username
	d, err := local.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}})
	if err != nil {
		t.Fatalf("CreateDomain over the socket: %v", err)
	}
	if d.GetCreatedBy() != mine || len(d.GetAcl().GetAdmins()) != 1 || d.GetAcl().GetAdmins()[0] != mine {
		t.Errorf("domain created over the socket: by %q, admins %v; want %s", d.GetCreatedBy(), d.GetAcl().GetAdmins(), mine)
	}
	_, err = local.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Author: "mallory", Properties: []*lehrpb.Property{prop("k", "", "v")}})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || e.Field != "author" {
		t.Errorf("Publish over the socket by mallory: %v; want PERMISSION_DENIED on author", err)
	}
	resp, err := local.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Author: mine, Properties: []*lehrpb.Property{prop("k", "", "v")}})
	if err != nil {
		t.Fatalf("Publish over the socket, asserting who it is: %v", err)
	}
	if v := resp.GetVersion(); v.GetAuthor() != mine || !strings.HasPrefix(v.GetTransportIdentity(), "unix:uid=") {
		t.Errorf("version by %q over %q; want %s over unix:uid=…", v.GetAuthor(), v.GetTransportIdentity(), mine)
	}
	if _, err := local.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "fake"}); apierror.FromError(err) == nil ||
		apierror.FromError(err).Code != codes.PermissionDenied {
		t.Errorf("ReportZoneStatus over the socket: %v; want PERMISSION_DENIED (only distributors report)", err)
	}
	recs, err := local.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{Domain: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	var refusedTCP bool
	for _, r := range recs.GetRecords() {
		if r.GetMethod() == "CreateDomain" && r.GetCode() == "PERMISSION_DENIED" && r.GetAuthor() == "anonymous" {
			refusedTCP = true
		}
		if r.GetTransportIdentity() != "" && strings.HasPrefix(r.GetTransportIdentity(), "unix:") && r.GetAuthor() != mine {
			t.Errorf("audit record %v: author %q; want %s", r, r.GetAuthor(), mine)
		}
	}
	if !refusedTCP {
		t.Errorf("the refused TCP CreateDomain is not in the audit log as anonymous's (not as the mallory it asserted): %v", recs.GetRecords())
	}
}
