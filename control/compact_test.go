package control_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// TestDaemonCompactsHistory checks that the daemon runs the history
// compactor every CompactInterval with its Retention: old versions go, the
// newest KeepLast stay and are still readable, and reading a removed one
// names the oldest kept.
func TestDaemonCompactsHistory(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{
		Retention:       store.Retention{KeepLast: 2, KeepFor: time.Nanosecond},
		CompactInterval: 50 * time.Millisecond,
	})
	cl := srv.Client
	createDomain(t, cl, "c", nil)
	for _, v := range []string{"1", "2", "3", "4", "5"} {
		publish(t, cl, "c/app", prop("k", "", v))
	}
	wait.For(t, "the compactor to keep only versions 5 and 4", func() bool {
		return cmp.Equal(seqs(history(t, cl, "c/app", 0)), []uint64{5, 4})
	})
	ns, err := cl.GetNamespace(testCtx(t), &lehrpb.GetNamespaceRequest{Name: "c/app"})
	if err != nil {
		t.Fatal(err)
	}
	if ns.GetOldestVersion() != 4 || ns.GetLatestVersion() != 5 {
		t.Errorf("namespace oldest %d latest %d, want 4 and 5", ns.GetOldestVersion(), ns.GetLatestVersion())
	}
	if got := getVersion(t, cl, "c/app", 4); string(got.GetProperties()[0].GetValue()) != "4" {
		t.Errorf("version 4 reads %q, want 4", got.GetProperties()[0].GetValue())
	}
	_, err = cl.Get(testCtx(t), &lehrpb.GetRequest{Namespace: "c/app", Version: 1})
	if e := apierror.FromError(err); e.Code != codes.NotFound || !strings.Contains(e.Message, "from 4 on") {
		t.Errorf("Get of a compacted version = %v; want NOT_FOUND naming version 4 as the oldest kept", err)
	}
}
