package upstream_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/testenv/wait"
)

// serverTLS is a distributor-side configuration whose certificate has
// CommonName name and identity URI id (nil: none), signed by the test CA
// the agents trust.
func (p *hostPKI) serverTLS(t *testing.T, name string, id *url.URL) *tls.Config {
	t.Helper()
	c, k, err := p.ca.IssueURIFiles(filepath.Join(p.dir, "leaf"), name, pki.Server, nil, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsconfig.Server(c, k, filepath.Join(p.dir, "ca", pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An agent of zone-a talks only to a distributor whose certificate names a
// distributor of zone-a (issue 28, item 3): listed "zone-a distributors"
// that present zone-b's distributor certificate, control's certificate or
// one without a Lehr identity — all signed by the CA the agent trusts,
// and all serving zone-a content — are refused before Hello, each with an
// error in the log naming what the certificate is and a count in
// lehr_agent_refused_distributors_total, and the agent fails over to the
// honest one. The imposters never see the subscription nor deliver
// anything. The simulated agent (agenttest) makes the same decision.
func TestAgentAcceptsOnlyDistributorsOfItsZone(t *testing.T) {
	p := newPKI(t)
	imposters := []struct {
		name, want string
		id         *url.URL
	}{
		{"zone-b", "(spiffe://lehr/distributor/zone-b/evil); this agent is in zone", tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-b", Name: "evil"}.URI()},
		{"control", "a control's (spiffe://lehr/control/ctl)", tlsconfig.Identity{Role: tlsconfig.RoleControl, Name: "ctl"}.URI()},
		{"no identity", "carries no Lehr identity", nil},
	}
	evil := version("app/cfg", 9, map[string]string{"a": "evil"})
	var addrs []string
	var dists []*dist
	for _, imp := range imposters {
		d := startDistOn(t, p.serverTLS(t, "imposter", imp.id), "imposter", "127.0.0.1:0")
		d.setGoal(t, evil)
		dists = append(dists, d)
		addrs = append(addrs, d.srv.Addr().String())
	}
	honest := startDist(t, p, "d1")
	good := version("app/cfg", 1, map[string]string{"a": "honest"})
	honest.setGoal(t, good)

	var logs syncBuffer
	h := newMem()
	cl := newClient(t, p, h, func(o *upstream.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, append(addrs, honest.srv.Addr().String())...)
	cl.c.Subscribe("app/cfg")
	cl.start(t)
	waitHeld(t, h, good)
	if got := h.appliedVersions("app/cfg"); len(got) != 1 || got[0] != good.Seq {
		t.Errorf("applied versions %v, want only the honest distributor's %d", got, good.Seq)
	}
	if got := counter(cl.set, "lehr_agent_refused_distributors_total"); got < uint64(len(imposters)) {
		t.Errorf("lehr_agent_refused_distributors_total = %d, want at least %d", got, len(imposters))
	}
	if st := cl.c.Status(); st.DistributorIdentity != "spiffe://lehr/distributor/zone-a/distributor" {
		t.Errorf("Status().DistributorIdentity = %q, want the honest distributor's", st.DistributorIdentity)
	}
	for i, imp := range imposters {
		st := dists[i].srv.Stats()
		if st.Agents != 0 || st.SnapshotPushes+st.PatchPushes != 0 {
			t.Errorf("imposter %s: %d agents, %d pushes; want none (refused before Hello)", imp.name, st.Agents, st.SnapshotPushes+st.PatchPushes)
		}
		if !strings.Contains(logs.String(), imp.want) {
			t.Errorf("imposter %s: no log line saying %q; log:\n%s", imp.name, imp.want, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "refusing distributor") {
		t.Errorf("no \"refusing distributor\" in the log:\n%s", logs.String())
	}

	// The simulated agent refuses the same distributors, with the same
	// error.
	for i, imp := range imposters {
		ctx, cancel := context.WithTimeout(context.Background(), wait.Timeout)
		a, err := agenttest.Dial(ctx, agenttest.Options{Addr: addrs[i], TLS: p.tls(t, "host-2", pki.Client), HostID: "host-2", Zone: zone,
			Subscriptions: []string{"app/cfg"}, Logger: quiet()})
		cancel()
		if err == nil {
			a.Close()
			t.Errorf("agenttest: the imposter %s was accepted", imp.name)
		} else if !errors.Is(err, upstream.ErrDistributorIdentity) {
			t.Errorf("agenttest: the imposter %s: %v, want ErrDistributorIdentity", imp.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait.Timeout)
	defer cancel()
	a, err := agenttest.Dial(ctx, agenttest.Options{Addr: honest.srv.Addr().String(), TLS: p.tls(t, "host-2", pki.Client), HostID: "host-2", Zone: zone,
		Subscriptions: []string{"app/cfg"}, Logger: quiet()})
	if err != nil {
		t.Fatalf("agenttest: the honest distributor: %v", err)
	}
	defer a.Close()
	if err := a.WaitVersion(ctx, "app/cfg", good.Seq); err != nil {
		t.Fatal(err)
	}
}
