package control_test

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// backupOnce takes a backup and returns its bytes and last message.
func backupOnce(t *testing.T, cl lehrpb.ControlClient) (int, *lehrpb.BackupStoreResponse, error) {
	t.Helper()
	st, err := cl.BackupStore(testCtx(t), &lehrpb.BackupStoreRequest{})
	if err != nil {
		return 0, nil, err
	}
	var n int
	var last *lehrpb.BackupStoreResponse
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return n, last, nil
		}
		if err != nil {
			return n, nil, err
		}
		n += len(m.GetChunk())
		last = m
	}
}

// TestBackupNeedsAFleetAdmin: a backup holds every domain's content, so a
// user who is not a fleet admin (and a caller control cannot identify) is
// refused; a named fleet admin and control's own user on its socket get
// the snapshot; every call is audited.
func TestBackupNeedsAFleetAdmin(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	sock := filepath.Join(t.TempDir(), "control.sock")
	c := startSecure(t, control.Options{TLS: serverTLS, Socket: sock, FleetAdmins: []string{"ops"}})
	dial := func(name string) lehrpb.ControlClient {
		id := tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}
		cert := issueID(t, ca, caKey, id.Name, false, id.URI())
		return lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, cert)))
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	local := lehrpb.NewControlClient(conn)

	if n, _, err := backupOnce(t, dial("eve")); apierror.FromError(err).Code != codes.PermissionDenied || n != 0 ||
		!strings.Contains(apierror.FromError(err).Message, "--fleet-admins") {
		t.Errorf("eve's backup: %d bytes, %v; want PERMISSION_DENIED naming --fleet-admins and no bytes", n, err)
	}
	for name, cl := range map[string]lehrpb.ControlClient{"ops": dial("ops"), "control's own user": local} {
		n, last, err := backupOnce(t, cl)
		if err != nil || n == 0 || last.GetSizeBytes() != int64(n) || len(last.GetSha256()) != 64 {
			t.Errorf("%s's backup: %d bytes, last %v, %v; want the snapshot with its size and SHA-256", name, n, last, err)
		}
	}
	recs, err := local.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs.GetRecords() {
		if r.GetMethod() == "BackupStore" {
			got[r.GetAuthor()] = r.GetCode()
		}
	}
	if got["eve"] != "PERMISSION_DENIED" || got["ops"] != "OK" || len(got) != 3 {
		t.Errorf("audited backups %v; want eve refused, ops and control's own user OK", got)
	}
}
