package control_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
)

// The embedded etcd is reachable only by control's user: it serves clients
// on a unix socket in a 0700 directory beside its 0700 data directory, not
// on a loopback TCP port any local user could connect to and read or
// write /lehr/* through (issue 12, the probe's finding); its peer port
// takes only its own certificates (control/embedetcd's tests).
func TestEmbeddedEtcdIsPrivate(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	createDomain(t, srv.Client, "pay", nil) // control works over the sockets
	etcdDir := filepath.Join(srv.DataDir, "etcd")
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{
		{etcdDir, os.ModeDir | 0o700},
		{etcdDir + ".sock", os.ModeDir | 0o700},
	} {
		fi, err := os.Stat(tc.path)
		if err != nil || fi.Mode()&(os.ModeDir|os.ModePerm) != tc.mode {
			t.Errorf("%s: %v, %v; want %v", tc.path, fi.Mode(), err, tc.mode)
		}
	}
	fi, err := os.Stat(filepath.Join(etcdDir+".sock", "client"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("etcd client socket: %v, %v; want a unix socket", fi, err)
	}
}

// Audit records are written in the background; stopping control writes
// what is queued first, so a restarted control lists every call.
func TestAuditRecordsSurviveStop(t *testing.T) {
	dir := t.TempDir()
	srv := controltest.StartControl(t, control.Options{DataDir: dir})
	createDomain(t, srv.Client, "pay", nil)
	for i := range 20 {
		publish(t, srv.Client, "pay/a", prop("k", "", fmt.Sprint(i)))
	}
	srv.Stop()
	again := controltest.StartControl(t, control.Options{DataDir: dir})
	resp, err := again.Client.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{Domain: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetRecords()); n != 21 {
		t.Errorf("%d audit records after a restart; want 21 (a domain and 20 publishes)", n)
	}
}
