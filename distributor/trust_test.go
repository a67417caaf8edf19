package distributor_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A distributor against control with mutual TLS, as deployed (issue 28,
// items 2 and 4): it reports under its certificate's id, and holds the
// goals of a domain whose readers do not admit its zone only while an
// admin lets them.
func TestDistributorUnderMutualTLS(t *testing.T) {
	p := newPKI(t)
	caFile := filepath.Join(p.dir, "ca", pki.CACertFile)
	certFor := func(name string, kind pki.Kind, id tlsconfig.Identity, client bool) *tls.Config {
		t.Helper()
		c, k, err := p.ca.IssueURIFiles(filepath.Join(p.dir, name), name, kind, []string{"127.0.0.1"}, id.URI(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var tc *tls.Config
		if client {
			tc, err = tlsconfig.Client(c, k, caFile, "127.0.0.1")
		} else {
			tc, err = tlsconfig.Server(c, k, caFile)
		}
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	srv := controltest.StartControl(t, control.Options{
		TLS:         certFor("control", pki.Server, tlsconfig.Identity{Role: tlsconfig.RoleControl, Name: "control"}, false),
		FleetAdmins: []string{"admin"},
	}, grpc.WithTransportCredentials(credentials.NewTLS(certFor("admin", pki.Client, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: "admin"}, true))))
	ctx, cl := ctxT(t), srv.Client
	for _, d := range []*lehrpb.Domain{{Name: "open"}, {Name: "bonly", Acl: &lehrpb.Acl{Readers: []string{"zone-b"}}}} {
		if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: d}); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, cl, "open/x", "k", "1")
	publish(t, cl, "bonly/x", "k", "1")

	d, err := distributor.New(distributor.Options{Zone: zone, ControlAddr: srv.Addr, Listen: "127.0.0.1:0",
		TLS:            p.tls("distributor", pki.Server),
		ControlTLS:     certFor("dist-7", pki.Both, tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: "dist-7"}, true),
		ReportInterval: 100 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() { d.Close(); <-done })

	// Its reports are filed under the certificate's id.
	wait.For(t, "a report of dist-7", func() bool {
		st, err := cl.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zone})
		return err == nil && len(st.GetDistributors()) == 1 && st.GetDistributors()[0].GetDistributorId() == "dist-7"
	})
	if n := d.Stats().ReportErrors; n != 0 {
		t.Errorf("%d reports refused", n)
	}

	// Goals: bonly's only while its readers admit the zone. A distributor
	// holds only what its agents subscribe to: host-1 uses both.
	dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{"open/x", "bonly/x"}})
	serving := func(n int) func() bool {
		return func() bool { st := d.Stats(); return st.Goals == n && st.Serving == n }
	}
	wait.For(t, "open/x served, bonly/x not", serving(1))

	// A host of the zone that subscribes to bonly/x hears why it gets
	// nothing — the readers, not a missing goal (issue 28, item 8) —
	// though control gave the distributor no goal of bonly's.
	host := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{"bonly/x"}})
	wait.For(t, "host-2 told FORBIDDEN", func() bool {
		u, ok := host.Unavailable("bonly/x")
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN
	})
	if u, _ := host.Unavailable("bonly/x"); !strings.Contains(u.GetDetail(), "domain bonly's acl.readers (zone-b) include neither zone "+zone) {
		t.Errorf("FORBIDDEN's detail %q does not name the readers", u.GetDetail())
	}
	host.Close()
	setReaders := func(readers ...string) {
		t.Helper()
		if _, err := cl.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "bonly", Acl: &lehrpb.Acl{Readers: readers}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}); err != nil {
			t.Fatal(err)
		}
	}
	setReaders("zone-b", zone+"/host-1")
	wait.For(t, "bonly/x served once its readers admit a host of the zone", serving(2))
	setReaders("zone-b")
	wait.For(t, "bonly/x dropped once they no longer do", serving(1))
}
