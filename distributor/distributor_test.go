package distributor_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/agent/agenttest"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/distributor"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/internal/buildinfo"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

const zone = "zone-a"

type hostPKI struct {
	t   *testing.T
	dir string
	ca  *pki.CA
}

func newPKI(t *testing.T) *hostPKI {
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"), "lehr-test-ca", 24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return &hostPKI{t: t, dir: dir, ca: ca}
}

func (p *hostPKI) tls(name string, kind pki.Kind) *tls.Config {
	p.t.Helper()
	c, k, err := p.ca.IssueURIFiles(filepath.Join(p.dir, "leaf"), name, kind, nil, identityOf(name, kind), time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	caFile := filepath.Join(p.dir, "ca", pki.CACertFile)
	var tc *tls.Config
	if kind == pki.Server {
		tc, err = tlsconfig.Server(c, k, caFile)
	} else {
		tc, err = tlsconfig.Client(c, k, caFile, "127.0.0.1")
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return tc
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startDistributor runs a distributor against control at addr.
func startDistributor(t *testing.T, p *hostPKI, addr string) *distributor.Distributor {
	t.Helper()
	d, err := distributor.New(distributor.Options{
		Zone:           zone,
		ID:             "dist-1",
		ControlAddr:    addr,
		Listen:         "127.0.0.1:0",
		TLS:            p.tls("distributor", pki.Server),
		MetricsListen:  "127.0.0.1:0",
		ReportInterval: 100 * time.Millisecond,
		Logger:         quiet(),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() {
		d.Close()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	}
	return d
}

func dial(t *testing.T, p *hostPKI, d *distributor.Distributor, host string, opts agenttest.Options) *agenttest.Agent {
	t.Helper()
	opts.Addr = d.Addr().String()
	opts.TLS = p.tls(host, pki.Client)
	opts.HostID = host
	opts.Zone = zone
	opts.Logger = quiet()
	a, err := agenttest.Dial(ctxT(t), opts)
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func waitVersion(t *testing.T, a *agenttest.Agent, ns string, v *lehrpb.VersionInfo) {
	t.Helper()
	if err := a.WaitVersion(ctxT(t), ns, v.GetSeq()); err != nil {
		t.Fatalf("%s never reached %s@%d: %v", a.HostID(), ns, v.GetSeq(), err)
	}
	if h, _ := a.Held(ns); h.Ref.Checksum != v.GetChecksum() {
		t.Fatalf("%s holds %s@%d checksum %s, want %s", a.HostID(), ns, h.Ref.Seq, h.Ref.Checksum, v.GetChecksum())
	}
}

func setup(t *testing.T, cl lehrpb.ControlClient) {
	if _, err := cl.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, cl lehrpb.ControlClient, ns string, kv ...string) *lehrpb.VersionInfo {
	t.Helper()
	var ps []*lehrpb.Property
	for i := 0; i < len(kv); i += 2 {
		ps = append(ps, &lehrpb.Property{Key: kv[i], Value: []byte(kv[i+1])})
	}
	resp, err := cl.Publish(ctxT(t), &lehrpb.PublishRequest{Namespace: ns, Properties: ps})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return resp.GetVersion()
}

func TestPublishReachesAgentsAndIsReported(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	setup(t, srv.Client)
	p := newPKI(t)
	d := startDistributor(t, p, srv.Addr)
	ns := "d/app"
	v1 := publish(t, srv.Client, ns, "a", "1", "b", "2", "c", "3")
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)

	pr, err := srv.Client.Patch(ctxT(t), &lehrpb.PatchRequest{Namespace: ns, BaseVersion: v1.GetSeq(), Set: []*lehrpb.Property{{Key: "b", Value: []byte("two")}}})
	if err != nil {
		t.Fatal(err)
	}
	v2 := pr.GetVersion()
	waitVersion(t, a, ns, v2)
	applied := a.Applied(ns)
	if len(applied) != 2 || !applied[0].Snapshot || applied[1].Snapshot {
		t.Fatalf("applied %+v, want a snapshot then a patch", applied)
	}
	if diff := cmp.Diff([]string{"b"}, applied[1].Set); diff != "" || len(applied[1].Delete) != 0 {
		t.Errorf("patch keys (-want +got):\n%s deletes %v", diff, applied[1].Delete)
	}
	// v2 was built from the change control sent with its goal event, not
	// fetched: one call to control fewer on the way to the agents.
	if st := d.Stats().Cache; st.Offered != 1 || st.Deltas != 0 || st.Fetches != 1 {
		t.Errorf("version cache: %d built from goal events, %d from fetched deltas, %d fetched whole; want 1, 0, 1 (v1)", st.Offered, st.Deltas, st.Fetches)
	}

	// Convergence is reported and reaches control.
	want := []fanout.VersionCount{{Namespace: ns, Version: v2.GetSeq(), Agents: 1}}
	wait.For(t, "convergence at v2", func() bool {
		agents, counts := d.Convergence()
		return agents == 1 && cmp.Equal(want, counts)
	})
	wait.For(t, "a report", func() bool { return d.Stats().Reports > 0 })
	if _, err := srv.Client.GetZoneStatus(ctxT(t), &lehrpb.GetZoneStatusRequest{Zone: zone}); status.Code(err) == codes.Unimplemented {
		t.Fatal("control answers GetZoneStatus with Unimplemented; the report cannot be checked")
	} else {
		wait.For(t, "zone status with the agent at v2", func() bool {
			st, err := srv.Client.GetZoneStatus(ctxT(t), &lehrpb.GetZoneStatusRequest{Zone: zone})
			if err != nil {
				return false
			}
			for _, vc := range st.GetVersions() {
				if vc.GetNamespace() == ns && vc.GetVersion() == v2.GetSeq() && vc.GetAgents() == 1 {
					return true
				}
			}
			return false
		})
	}

	// Metrics are served.
	resp, err := http.Get("http://" + d.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"lehr_distributor_connected_agents 1",
		`lehr_distributor_pushes_total{kind="patch"} 1`,
		`lehr_distributor_pushes_total{kind="snapshot"} 1`,
		`lehr_distributor_namespace_lag{namespace="d/app"} 0`,
		"lehr_distributor_acks_total 2",
		`lehr_distributor_versions_built_total{from="goal_event_delta"} 1`,
		`lehr_distributor_versions_built_total{from="fetch"} 1`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Restarting the agent with its cache costs no snapshot bytes.
	cached := a.Cached()
	a.Close()
	before := d.Stats()
	b := dial(t, p, d, "host-1", agenttest.Options{Cached: cached, Subscriptions: []string{ns}})
	v3 := publish(t, srv.Client, ns, "a", "1", "b", "two", "c", "three")
	waitVersion(t, b, ns, v3)
	if got := d.Stats().SnapshotBytes - before.SnapshotBytes; got != 0 {
		t.Errorf("snapshot bytes after a restart with an intact cache = %d, want 0", got)
	}
}

// An upgrade's progress reaches control: the distributor reports its own
// build and its agents per build, an agent too old to announce one as
// unknown — and serves that agent as any other (docs/operations.md,
// "Versions").
func TestZoneStatusCountsBuilds(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	setup(t, srv.Client)
	p := newPKI(t)
	d := startDistributor(t, p, srv.Addr)
	ns := "d/app"
	v1 := publish(t, srv.Client, ns, "a", "1")
	const build = "0.2.0+5d1e8a2c9f00"
	old := dial(t, p, d, "host-old", agenttest.Options{Legacy: true, Subscriptions: []string{ns}})
	cur := dial(t, p, d, "host-new", agenttest.Options{AgentVersion: build, Subscriptions: []string{ns}})
	waitVersion(t, old, ns, v1)
	waitVersion(t, cur, ns, v1)

	wantAgents := []*lehrpb.BuildCount{{Build: build, Count: 1}, {Build: "unknown", Count: 1}}
	wantDists := []*lehrpb.BuildCount{{Build: buildinfo.Get().String(), Count: 1}}
	var st *lehrpb.GetZoneStatusResponse
	wait.For(t, "the zone's status to count both agents per build", func() bool {
		var err error
		st, err = srv.Client.GetZoneStatus(ctxT(t), &lehrpb.GetZoneStatusRequest{Zone: zone})
		return err == nil && len(st.GetAgentBuilds()) == 2
	})
	if diff := cmp.Diff(wantAgents, st.GetAgentBuilds(), protocmp.Transform()); diff != "" {
		t.Errorf("agent_builds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantDists, st.GetDistributorBuilds(), protocmp.Transform()); diff != "" {
		t.Errorf("distributor_builds (-want +got):\n%s", diff)
	}
	if err := old.Err(); err != nil {
		t.Errorf("the older agent's connection ended: %v", err)
	}
}

func TestServesFromMemoryWhileControlIsDown(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	setup(t, srv.Client)
	p := newPKI(t)
	d := startDistributor(t, p, srv.Addr)
	ns := "d/app"
	v1 := publish(t, srv.Client, ns, "k", "1", "other", "value", "third", "value")
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)

	srv.Stop()
	wait.For(t, "distributor to notice control is gone", func() bool { return !d.Stats().ControlConnected })
	// A new agent subscribing to a known namespace still gets it.
	b := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, b, ns, v1)

	// Control comes back: the watch resumes and new versions flow.
	srv2 := controltest.StartControl(t, control.Options{DataDir: srv.DataDir, Listen: srv.Addr})
	v2 := publish(t, srv2.Client, ns, "k", "2", "other", "value", "third", "value")
	waitVersion(t, a, ns, v2)
	waitVersion(t, b, ns, v2)
	st := d.Stats()
	if st.ControlReconnects < 1 {
		t.Errorf("ControlReconnects = %d, want at least 1", st.ControlReconnects)
	}
	for _, ag := range []*agenttest.Agent{a, b} {
		last := ag.Applied(ns)
		if l := last[len(last)-1]; l.Snapshot {
			t.Errorf("%s got v2 as a snapshot, want a patch", ag.HostID())
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	p := newPKI(t)
	server := p.tls("distributor", pki.Server)
	tests := []struct {
		name string
		opts distributor.Options
		want string
	}{
		{"bad zone", distributor.Options{Zone: "no such zone!", ControlAddr: "127.0.0.1:1", TLS: server}, "Zone"},
		{"no control", distributor.Options{Zone: zone, TLS: server}, "ControlAddr"},
		{"no TLS", distributor.Options{Zone: zone, ControlAddr: "127.0.0.1:1"}, "TLS"},
		{"plaintext off loopback", distributor.Options{Zone: zone, ControlAddr: "10.1.2.3:7400", TLS: server}, "loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := distributor.New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// A distributor with a certificate for control reports under the
// certificate's id (control refuses any other, issue 28): it takes the id
// from the certificate and refuses another id or zone, and a report
// interval whose reports control would not keep long enough.
func TestIDFromControlCertificate(t *testing.T) {
	p := newPKI(t)
	server := p.tls("distributor", pki.Server)
	id := tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: "dist-7"}
	c, k, err := p.ca.IssueURIFiles(filepath.Join(p.dir, "dist"), "dist-7", pki.Both, nil, id.URI(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := tlsconfig.Client(c, k, filepath.Join(p.dir, "ca", pki.CACertFile), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	opts := func(edit func(o *distributor.Options)) distributor.Options {
		o := distributor.Options{Zone: zone, ControlAddr: "127.0.0.1:1", TLS: server, ControlTLS: ctl, Logger: quiet()}
		edit(&o)
		return o
	}
	d, err := distributor.New(opts(func(*distributor.Options) {}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if d.ID() != "dist-7" {
		t.Errorf("ID() = %q, want dist-7 from the certificate", d.ID())
	}
	d.Close()
	d, err = distributor.New(opts(func(o *distributor.Options) { o.ID = "dist-7" }))
	if err != nil {
		t.Fatalf("New with the certificate's id: %v", err)
	}
	d.Close()
	for _, tt := range []struct {
		name string
		edit func(o *distributor.Options)
		want string
	}{
		{"another id", func(o *distributor.Options) { o.ID = "dist-8" }, `Options.ID is "dist-8" but the client certificate for control is spiffe://lehr/distributor/zone-a/dist-7`},
		{"another zone", func(o *distributor.Options) { o.Zone = "zone-b" }, `a distributor of zone "zone-a"`},
		{"reports kept too long", func(o *distributor.Options) { o.ReportInterval = 2 * time.Minute }, "ReportInterval 2m0s: at most 1m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := distributor.New(opts(tt.edit))
			if err == nil {
				d.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// identityOf is the Lehr identity a test certificate carries: a host's in
// zone for a client, none for a server.
func identityOf(name string, kind pki.Kind) *url.URL {
	if kind != pki.Client {
		return tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: name}.URI()
	}
	return tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: zone, Name: name}.URI()
}

// The distributor reads a domain's readers from control before serving
// its namespaces and again every DomainRefresh: a host outside them is
// told FORBIDDEN and sent nothing; after an admin names it, it is served.
func TestDomainReadersFromControl(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	if _, err := srv.Client.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d",
		Acl: &lehrpb.Acl{Readers: []string{zone + "/host-1"}}}}); err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	d, err := distributor.New(distributor.Options{Zone: zone, ID: "dist-1", ControlAddr: srv.Addr, Listen: "127.0.0.1:0",
		TLS: p.tls("distributor", pki.Server), DomainRefresh: 200 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() { d.Close(); <-done })
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	}
	ns := "d/secret"
	v1 := publish(t, srv.Client, ns, "k", "v")
	in := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	out := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, in, ns, v1)
	wait.For(t, "host-2 told FORBIDDEN", func() bool {
		u, ok := out.Unavailable(ns)
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_FORBIDDEN
	})
	if got := out.Applied(ns); len(got) != 0 {
		t.Fatalf("host-2 received %v", got)
	}
	if _, err := srv.Client.UpdateDomain(ctxT(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "d",
		Acl: &lehrpb.Acl{Readers: []string{zone + "/host-1", zone + "/host-2"}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, out, ns, v1)
}

// A domain's subscription quota is the zone's: control counts the zone's
// distributors in its answer to their reports, and each serves its share.
func TestQuotaSplitAcrossTheZone(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	if _, err := srv.Client.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d",
		Quotas: &lehrpb.Quotas{MaxSubscriptions: 2}}}); err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	var ds []*distributor.Distributor
	for _, id := range []string{"dist-1", "dist-2"} {
		d, err := distributor.New(distributor.Options{Zone: zone, ID: id, ControlAddr: srv.Addr, Listen: "127.0.0.1:0",
			TLS: p.tls("distributor", pki.Server), ReportInterval: 100 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(context.Background()) }()
		t.Cleanup(func() { d.Close(); <-done })
		<-d.Ready()
		ds = append(ds, d)
	}
	for _, d := range ds {
		g := d.Metrics().GetOrCreateGauge("lehr_distributor_zone_distributors", nil)
		wait.For(t, "both distributors counted", func() bool { return g.Get() == 2 })
	}
	ns := "d/x"
	v1 := publish(t, srv.Client, ns, "k", "v")
	a := dial(t, p, ds[0], "host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v1)
	b := dial(t, p, ds[0], "host-2", agenttest.Options{Subscriptions: []string{ns}})
	wait.For(t, "host-2 told OVER_QUOTA: dist-1's share is one of two", func() bool {
		u, ok := b.Unavailable(ns)
		return ok && u.GetReason() == lehrpb.UnavailableReason_UNAVAILABLE_REASON_OVER_QUOTA
	})
	c := dial(t, p, ds[1], "host-3", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, c, ns, v1)
}

// TestFailsOverBetweenControlReplicas runs two control replicas on one
// etcd and a distributor given both. Each replica is stopped in turn (so
// the one serving the distributor's goal watch is stopped at some point)
// and a version published through the other must still reach the agent:
// a zone is never pinned to one replica (issue 29: 72 s without delivery
// when the distributor's only replica was killed).
func TestFailsOverBetweenControlReplicas(t *testing.T) {
	ctx := ctxT(t)
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	replicas := []*controltest.Server{
		controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints()}),
		controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints()}),
	}
	setup(t, replicas[0].Client)
	p := newPKI(t)
	d := startDistributor(t, p, replicas[0].Addr+","+replicas[1].Addr)
	ns := "d/app"
	v := publish(t, replicas[0].Client, ns, "k", "0")
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{ns}})
	waitVersion(t, a, ns, v)

	for i, down := range replicas {
		up := replicas[1-i]
		before := d.Stats().ControlReconnects
		down.Stop()
		stopped := time.Now()
		v = publish(t, up.Client, ns, "k", strconv.Itoa(i+1))
		waitVersion(t, a, ns, v)
		t.Logf("replica %d stopped: version %d applied %v later (%d goal watch reconnection(s))",
			i, v.GetSeq(), time.Since(stopped).Round(time.Millisecond), d.Stats().ControlReconnects-before)
		if i == 0 {
			// Bring it back on the same address for the second round.
			replicas[0] = controltest.StartControl(t, control.Options{EtcdEndpoints: cluster.Endpoints(), DataDir: down.DataDir, Listen: down.Addr})
		}
	}
}

// TestHoldsOnlyWhatItsAgentsUse: a distributor loads a namespace's
// content when the first of its agents subscribes to it and releases it
// when the last leaves, so a zone's distributors hold what its hosts use,
// not the catalog (issue 27: 20,000 namespaces and no agent took 2.2 GiB).
func TestHoldsOnlyWhatItsAgentsUse(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	if _, err := srv.Client.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d",
		Quotas: &lehrpb.Quotas{PublishesPerSecond: 1000, PublishBurst: 1000}}}); err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	const catalog = 40
	vs := map[string]*lehrpb.VersionInfo{}
	for i := range catalog {
		ns := fmt.Sprintf("d/ns%02d", i)
		vs[ns] = publish(t, srv.Client, ns, "k", strings.Repeat("v", 1000))
	}
	d := startDistributor(t, p, srv.Addr)
	wait.For(t, "every goal known", func() bool { return d.Stats().Goals == catalog })
	if st := d.Stats(); st.Serving != 0 || st.Cache.Fetches != 0 || st.Cache.Bytes != 0 {
		t.Fatalf("with no agent: serving %d goals, %d fetches, %d bytes cached; want 0, 0, 0", st.Serving, st.Cache.Fetches, st.Cache.Bytes)
	}

	// An agent subscribing to two gets them — without first hearing that
	// the distributor knows no goal — and only those two are loaded.
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: []string{"d/ns01", "d/ns02"}})
	waitVersion(t, a, "d/ns01", vs["d/ns01"])
	waitVersion(t, a, "d/ns02", vs["d/ns02"])
	for _, ns := range []string{"d/ns01", "d/ns02"} {
		if u, ok := a.Unavailable(ns); ok {
			t.Errorf("%s: agent was told %v (%s) while its goal loaded", ns, u.GetReason(), u.GetDetail())
		}
	}
	wait.For(t, "two goals served", func() bool { return d.Stats().Serving == 2 }) // counted every 100 ms
	if st := d.Stats(); st.Wanted != 2 || st.Cache.Fetches != 2 {
		t.Errorf("one agent of 2 namespaces: %d wanted, %d fetched; want 2, 2", st.Wanted, st.Cache.Fetches)
	}
	// A second agent of one of them costs nothing more.
	b := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: []string{"d/ns01"}})
	waitVersion(t, b, "d/ns01", vs["d/ns01"])

	// A change of a namespace no agent here uses is not fetched.
	publish(t, srv.Client, "d/ns30", "k", "changed")
	v := publish(t, srv.Client, "d/ns01", "k", "changed")
	waitVersion(t, a, "d/ns01", v)
	waitVersion(t, b, "d/ns01", v)
	if st := d.Stats(); st.Serving != 2 || st.Cache.Fetches+st.Cache.Offered+st.Cache.Deltas != 3 {
		t.Errorf("after changes of d/ns30 (unused) and d/ns01: %d served, %d fetched + %d built from goal events + %d from deltas; want 2 served, 3 loaded in all",
			st.Serving, st.Cache.Fetches, st.Cache.Offered, st.Cache.Deltas)
	}

	// The agents leave: nothing is held any more.
	a.Close()
	b.Close()
	wait.For(t, "nothing wanted or served", func() bool { st := d.Stats(); return st.Wanted == 0 && st.Serving == 0 })
}

// TestStaysWithinCacheBytes: the namespaces its agents use take more than
// --cache-bytes; the distributor still serves every one (fetching evicted
// versions again from control) and holds no more than the bound (issue
// 27: a distributor of 7,500 agents × 10 of 71,000 namespaces would hold
// every wanted version, GiBs).
func TestStaysWithinCacheBytes(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	if _, err := srv.Client.CreateDomain(ctxT(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d",
		Quotas: &lehrpb.Quotas{PublishesPerSecond: 1000, PublishBurst: 1000}}}); err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	const bound = 64 << 10
	d, err := distributor.New(distributor.Options{Zone: zone, ID: "dist-1", ControlAddr: srv.Addr, Listen: "127.0.0.1:0",
		TLS: p.tls("distributor", pki.Server), ReportInterval: 100 * time.Millisecond, CacheBytes: bound, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	t.Cleanup(func() { d.Close(); <-done })
	<-d.Ready()

	var names []string
	vs := map[string]*lehrpb.VersionInfo{}
	for i := range 10 {
		ns := fmt.Sprintf("d/big%d", i)
		vs[ns] = publish(t, srv.Client, ns, "k", strings.Repeat(strconv.Itoa(i), 20<<10))
		names = append(names, ns)
	}
	a := dial(t, p, d, "host-1", agenttest.Options{Subscriptions: names})
	for _, ns := range names {
		waitVersion(t, a, ns, vs[ns])
	}
	if st := d.Stats().Cache; st.Bytes > bound {
		t.Errorf("cache holds %d bytes for 10 namespaces of 20 KiB; want at most the %d bound", st.Bytes, bound)
	}
	// A second agent gets every one, evicted or not.
	b := dial(t, p, d, "host-2", agenttest.Options{Subscriptions: names})
	for _, ns := range names {
		waitVersion(t, b, ns, vs[ns])
	}
	// And a change of each still reaches both.
	for _, ns := range names {
		vs[ns] = publish(t, srv.Client, ns, "k", strings.Repeat("x", 20<<10))
	}
	for _, ns := range names {
		waitVersion(t, a, ns, vs[ns])
		waitVersion(t, b, ns, vs[ns])
	}
	if st := d.Stats().Cache; st.Bytes > bound || st.Evictions == 0 {
		t.Errorf("cache: %d bytes, %d evictions; want at most %d bytes, and evictions", st.Bytes, st.Evictions, bound)
	}
}
