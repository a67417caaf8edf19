package control_test

import (
	"os"
	"path/filepath"
	"testing"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
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
