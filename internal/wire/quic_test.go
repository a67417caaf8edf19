package wire_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/update"
	. "lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/proto/lehrpb"
)

// The tests of this file are an external package so that their two ends
// decide with internal/update, as the distributor and the agent do.

func prop(k, v string) content.Property { return content.Property{Key: k, Value: []byte(v)} }

func mustSnap(props ...content.Property) content.Snapshot {
	s, err := content.New(props)
	if err != nil {
		panic(err)
	}
	return s
}

const testTimeout = 30 * time.Second

// testPKI is a CA with one server and one client certificate, all made in
// memory for the test: the distributor's and the agent's TLS 1.3 configs,
// mutually authenticated.
type testPKI struct {
	server, client *tls.Config
	// serverBase is server before ServerTLSConfig.
	serverBase *tls.Config
	// leaf issues another certificate from the test CA.
	leaf func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate
}

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lehr test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	serverBase := &tls.Config{
		Certificates: []tls.Certificate{leaf(2, "distributor", x509.ExtKeyUsageServerAuth)},
		ClientCAs:    pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}
	return testPKI{
		server: ServerTLSConfig(serverBase), serverBase: serverBase, leaf: leaf,
		client: ClientTLSConfig(&tls.Config{
			Certificates: []tls.Certificate{leaf(3, "host-1", x509.ExtKeyUsageClientAuth)},
			RootCAs:      pool,
		}),
	}
}

// startListener serves QUIC on loopback and runs handle for every
// connection until the test ends; cleanup closes everything and waits for
// every handler.
func startListener(t testing.TB, tlsConf *tls.Config, handle func(ctx context.Context, conn *quic.Conn)) string {
	t.Helper()
	ln, err := quic.ListenAddr("127.0.0.1:0", tlsConf, ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(CodeShuttingDown, "test over") })
				defer stop()
				handle(ctx, conn)
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, tlsConf *tls.Config) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, tlsConf, ClientQUICConfig())
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.CloseWithError(CodeNoError, "") })
	return conn
}

// testGoals is the content a test distributor serves, by namespace and
// version.
type testGoals map[string][]*content.Version // versions in order; the last is the goal

func (g testGoals) find(ns string, ref content.Ref) *content.Version {
	for _, v := range g[ns] {
		if v.Seq == ref.Seq && v.Content.Checksum() == ref.Checksum {
			return v
		}
	}
	return nil
}

// testDistributor is the distributor side of a connection as the real one
// does it with this package and internal/update: handshake, version
// negotiation, update.Plan and update.Build from the cached state the agent announced, one stream per
// update, acks read from the control stream.
type testDistributor struct {
	t      *testing.T
	goals  testGoals
	events chan any // *lehrpb.Hello, *lehrpb.Ack, sentUpdate, error
	more   chan *content.Version
}

type sentUpdate struct {
	ns       string
	snapshot bool
	bytes    int
}

func (d *testDistributor) handle(ctx context.Context, conn *quic.Conn) {
	hctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	ctl, hello, err := AcceptControl(hctx, conn, Limits{})
	if err != nil {
		d.events <- err
		_ = CloseConn(conn, err)
		return
	}
	d.events <- hello
	v, err := Negotiate(hello)
	if err != nil {
		_ = CloseConn(conn, err)
		return
	}
	if err := ctl.Send(&lehrpb.Welcome{ProtocolVersion: v, DistributorId: "dist-test", Zone: hello.GetZone(),
		Capabilities: CommonCapabilities(hello.GetCapabilities(), nil)}); err != nil {
		d.events <- err
		return
	}
	cached := map[string]*lehrpb.CachedNamespace{}
	for _, c := range hello.GetCached() {
		cached[c.GetNamespace()] = c
	}
	var sends sync.WaitGroup
	defer sends.Wait()
	push := func(ns string, have content.Ref) {
		vs := d.goals[ns]
		goal := vs[len(vs)-1]
		base := d.goals.find(ns, have)
		var u *lehrpb.Update
		var err error
		switch update.Plan(have, content.Ref{Seq: goal.Seq, Checksum: goal.Content.Checksum()}, base != nil) {
		case update.SendNothing:
			return
		case update.SendPatch:
			u, err = update.Build(base, goal)
		case update.SendSnapshot:
			u, err = update.Build(nil, goal)
		}
		if err != nil {
			d.events <- err
			return
		}
		frame, err := AppendFrame(nil, u, Limits{})
		if err != nil {
			d.events <- err
			return
		}
		sends.Add(1)
		go func() { // concurrently: one stream per update
			defer sends.Done()
			if err := SendUpdate(ctx, conn, frame, 0); err != nil {
				d.events <- err
				return
			}
			d.events <- sentUpdate{ns: ns, snapshot: u.GetSnapshot(), bytes: len(frame)}
		}()
	}
	for _, ns := range hello.GetSubscriptions() {
		c := cached[ns]
		push(ns, content.Ref{Seq: c.GetVersion(), Checksum: c.GetChecksum()})
	}
	acked := map[string]*lehrpb.Ack{}
	recvErr := make(chan error, 1)
	msgs := make(chan any)
	recvDone := make(chan struct{})
	defer func() {
		_ = conn.CloseWithError(CodeNoError, "")
		<-recvDone
	}()
	go func() {
		defer close(recvDone)
		for {
			m, err := ctl.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-msgs:
			switch m := m.(type) {
			case *lehrpb.Ack:
				acked[m.GetNamespace()] = m
				d.events <- m
			case *lehrpb.Ping:
				_ = ctl.Send(&lehrpb.Pong{Nonce: m.GetNonce()})
			}
		case v := <-d.more:
			// A new goal for demo/a: patch from what the agent acked.
			d.goals["demo/a"] = append(d.goals["demo/a"], v)
			a := acked["demo/a"]
			push("demo/a", content.Ref{Seq: a.GetVersion(), Checksum: a.GetChecksum()})
		case err := <-recvErr:
			var fe *FrameError
			if errors.As(err, &fe) {
				_ = CloseConn(conn, err)
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// testAgent is the agent side: handshake with its cache, then every update
// stream read concurrently, checked and applied to the cache with
// update.Check and update.Apply, as the agent does, and acked.
type testAgent struct {
	conn *quic.Conn
	ctl  *Control
	mu   sync.Mutex
	held map[string]*content.Version
	errs chan error
	done chan struct{}
}

func startAgent(t *testing.T, conn *quic.Conn, held map[string]*content.Version, subs []string) *testAgent {
	t.Helper()
	hello := &lehrpb.Hello{ProtocolVersion: ProtocolVersion, MinProtocolVersion: MinProtocolVersion,
		HostId: "host-1", Zone: "zone-a", Subscriptions: subs, AgentVersion: "test"}
	for ns, v := range held {
		hello.Cached = append(hello.Cached, &lehrpb.CachedNamespace{Namespace: ns, Version: v.Seq, Checksum: v.Content.Checksum()})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ctl, welcome, err := OpenControl(ctx, conn, hello, Limits{})
	if err != nil {
		t.Fatalf("OpenControl: %v", err)
	}
	if welcome.GetProtocolVersion() != ProtocolVersion || welcome.GetDistributorId() != "dist-test" {
		t.Fatalf("Welcome = %v", welcome)
	}
	a := &testAgent{conn: conn, ctl: ctl, held: held, errs: make(chan error, 10), done: make(chan struct{})}
	go a.run()
	t.Cleanup(func() {
		_ = conn.CloseWithError(CodeNoError, "")
		<-a.done
	})
	return a
}

func (a *testAgent) run() {
	defer close(a.done)
	ctx := a.conn.Context()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s, err := a.conn.AcceptUniStream(ctx)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := ReadUpdateStream(ctx, s, Limits{})
			if err != nil {
				a.errs <- err
				return
			}
			a.mu.Lock()
			have := a.held[u.GetNamespace()]
			if have == nil {
				have = &content.Version{}
			}
			err = update.Check(content.Ref{Seq: have.Seq, Checksum: have.Content.Checksum()}, u)
			var next content.Snapshot
			if err == nil {
				next, err = update.Apply(have.Content, u)
			}
			if err == nil {
				a.held[u.GetNamespace()] = &content.Version{Namespace: u.GetNamespace(), Seq: u.GetVersion(), Content: next}
			}
			a.mu.Unlock()
			ack := &lehrpb.Ack{Namespace: u.GetNamespace(), Version: u.GetVersion(), Checksum: u.GetChecksum(), Ok: true}
			if err != nil {
				a.errs <- err
				ack = &lehrpb.Ack{Namespace: u.GetNamespace(), Version: have.Seq, Error: err.Error()}
			}
			if err := a.ctl.Send(ack); err != nil {
				a.errs <- err
			}
		}()
	}
}

func (a *testAgent) get(ns string) content.Version {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.held[ns]; v != nil {
		return *v
	}
	return content.Version{}
}

// waitEvent reads events until want returns true for one, failing on other
// errors and after testTimeout.
func waitEvent(t *testing.T, events <-chan any, what string, want func(any) bool) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case ev := <-events:
			if want(ev) {
				return
			}
			if err, ok := ev.(error); ok {
				t.Fatalf("waiting for %s: distributor error: %v", what, err)
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestQUICEndToEnd(t *testing.T) {
	pki := newTestPKI(t)
	a1 := &content.Version{Namespace: "demo/a", Seq: 1, Content: mustSnap(prop("greeting", "hello"), prop("limits/rps", "100"))}
	a2 := &content.Version{Namespace: "demo/a", Seq: 2, Content: mustSnap(prop("greeting", "hello"), prop("limits/rps", "250"))}
	b1 := &content.Version{Namespace: "demo/b", Seq: 1, Content: mustSnap(prop("flag", "off"), prop("bulk", string(make([]byte, 64<<10))))}
	b2 := &content.Version{Namespace: "demo/b", Seq: 2, Content: mustSnap(prop("flag", "on"), prop("bulk", string(make([]byte, 64<<10))))}
	dist := &testDistributor{
		t:      t,
		goals:  testGoals{"demo/a": {a1}, "demo/b": {b1, b2}},
		events: make(chan any, 100),
		more:   make(chan *content.Version, 1),
	}
	addr := startListener(t, pki.server, dist.handle)

	// Agent A holds demo/b at v1 and nothing of demo/a.
	agent := startAgent(t, dial(t, addr, pki.client), map[string]*content.Version{"demo/b": b1}, []string{"demo/a", "demo/b"})

	var hello *lehrpb.Hello
	waitEvent(t, dist.events, "Hello", func(ev any) bool { hello, _ = ev.(*lehrpb.Hello); return hello != nil })
	if len(hello.GetCached()) != 1 || hello.GetCached()[0].GetNamespace() != "demo/b" || hello.GetCached()[0].GetVersion() != 1 {
		t.Errorf("Hello.cached = %v, want demo/b at 1", hello.GetCached())
	}
	sent := map[string]sentUpdate{}
	acks := map[string]*lehrpb.Ack{}
	waitEvent(t, dist.events, "2 updates sent and acked", func(ev any) bool {
		switch ev := ev.(type) {
		case sentUpdate:
			sent[ev.ns] = ev
		case *lehrpb.Ack:
			acks[ev.GetNamespace()] = ev
		}
		return len(sent) == 2 && len(acks) == 2
	})
	if !sent["demo/a"].snapshot {
		t.Errorf("demo/a (not cached) was sent as a patch, want a snapshot")
	}
	if sent["demo/b"].snapshot || sent["demo/b"].bytes > 1024 {
		t.Errorf("demo/b (cached at v1) was sent as snapshot=%v of %d bytes, want a small patch", sent["demo/b"].snapshot, sent["demo/b"].bytes)
	}
	for ns, want := range map[string]*content.Version{"demo/a": a1, "demo/b": b2} {
		if ack := acks[ns]; !ack.GetOk() || ack.GetVersion() != want.Seq || ack.GetChecksum() != want.Content.Checksum() {
			t.Errorf("ack for %s = %v, want ok at %d", ns, ack, want.Seq)
		}
		if got := agent.get(ns); got.Seq != want.Seq || !got.Content.Equal(want.Content) {
			t.Errorf("agent holds %s at %d %v, want %d %v", ns, got.Seq, got.Content.Keys(), want.Seq, want.Content.Keys())
		}
	}

	// Bad peers: each is closed with CodeProtocolViolation.
	badInputs := map[string][]byte{
		"unknown frame type": {0xee, 0x01, 0x00},
		"garbage Hello":      {byte(FrameHello), 0x03, 0xff, 0xff, 0xff},
		"Subscribe first":    subscribeFrame(t),
	}
	for name, in := range badInputs {
		t.Run(name, func(t *testing.T) {
			conn := dial(t, addr, pki.client)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			s, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(in); err != nil {
				t.Fatal(err)
			}
			waitEvent(t, dist.events, "the distributor to see the bad frame", func(ev any) bool {
				err, _ := ev.(error)
				var fe *FrameError
				return errors.As(err, &fe)
			})
			select {
			case <-conn.Context().Done():
			case <-ctx.Done():
				t.Fatal("connection not closed")
			}
			code, remote, ok := CloseCode(context.Cause(conn.Context()))
			if !ok || !remote || code != CodeProtocolViolation {
				t.Errorf("closed with %v (code %#x remote %v); want remote CodeProtocolViolation", context.Cause(conn.Context()), uint64(code), remote)
			}
		})
	}

	// The good connection is unaffected: a new goal arrives as a patch on
	// a fresh stream and is acked.
	dist.more <- a2
	waitEvent(t, dist.events, "demo/a v2 acked", func(ev any) bool {
		if ev, ok := ev.(sentUpdate); ok && ev.ns == "demo/a" && ev.snapshot {
			t.Errorf("demo/a v2 was sent as a snapshot, want a patch")
		}
		ack, ok := ev.(*lehrpb.Ack)
		return ok && ack.GetNamespace() == "demo/a" && ack.GetVersion() == 2 && ack.GetOk()
	})
	if got := agent.get("demo/a"); !got.Content.Equal(a2.Content) {
		t.Errorf("agent holds demo/a %v, want v2", got.Content.Keys())
	}
	// Ping on the control stream reaches the distributor's loop.
	if err := agent.ctl.Send(&lehrpb.Ping{Nonce: 7}); err != nil {
		t.Fatal(err)
	}
	// And the listener still accepts new agents, which get only what they
	// miss: this one holds demo/a at v2 already.
	agent2 := startAgent(t, dial(t, addr, pki.client), map[string]*content.Version{"demo/a": a2}, []string{"demo/a"})
	waitEvent(t, dist.events, "second agent's Hello", func(ev any) bool { _, ok := ev.(*lehrpb.Hello); return ok })
	if got := agent2.get("demo/a"); got.Seq != 2 {
		t.Errorf("agent2 holds demo/a at %d, want 2", got.Seq)
	}
	select {
	case err := <-agent.errs:
		t.Errorf("agent error: %v", err)
	case err := <-agent2.errs:
		t.Errorf("agent2 error: %v", err)
	default:
	}
}

func TestOpenControlRefused(t *testing.T) {
	pki := newTestPKI(t)
	addr := startListener(t, pki.server, func(ctx context.Context, conn *quic.Conn) {
		hctx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		ctl, hello, err := AcceptControl(hctx, conn, Limits{})
		if err != nil {
			return
		}
		if _, err := Negotiate(hello); err != nil {
			_ = ctl.Goodbye(CodeFor(err), err.Error(), time.Minute)
			// Give the agent a moment to read the Goodbye and close first.
			select {
			case <-conn.Context().Done():
			case <-time.After(testTimeout):
			}
			_ = CloseConn(conn, err)
		}
	})
	conn := dial(t, addr, pki.client)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// A v2-only agent and a v1 distributor have nothing in common.
	_, _, err := OpenControl(ctx, conn, &lehrpb.Hello{ProtocolVersion: 2, MinProtocolVersion: 2, HostId: "h", Zone: "zone-a"}, Limits{})
	var ge *GoodbyeError
	if !errors.As(err, &ge) || ge.Code != CodeUnsupportedVersion || ge.RetryAfter != time.Minute {
		t.Fatalf("OpenControl = %v, want a Goodbye with CodeUnsupportedVersion and retry after 1m", err)
	}
	_ = CloseConn(conn, ge)
}

func TestOpenControlTimeout(t *testing.T) {
	pki := newTestPKI(t)
	addr := startListener(t, pki.server, func(ctx context.Context, conn *quic.Conn) {
		<-conn.Context().Done() // never answers
	})
	conn := dial(t, addr, pki.client)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, _, err := OpenControl(ctx, conn, &lehrpb.Hello{ProtocolVersion: 1, HostId: "h", Zone: "zone-a"}, Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("OpenControl = %v, want context.Canceled", err)
	}
}

// An update stream carrying a second frame is a protocol violation: the
// agent's reader refuses it and closes the connection with
// CodeProtocolViolation.
func TestReadUpdateStreamRejectsTrailingFrame(t *testing.T) {
	pki := newTestPKI(t)
	closed := make(chan error, 1)
	addr := startListener(t, pki.server, func(ctx context.Context, conn *quic.Conn) {
		s, err := conn.OpenUniStreamSync(ctx)
		if err != nil {
			closed <- err
			return
		}
		u := &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: content.Snapshot{}.Checksum()}
		enc := NewEncoder(s, Limits{})
		for i := 0; i < 2; i++ {
			if err := enc.Encode(u); err != nil {
				closed <- err
				return
			}
		}
		_ = s.Close()
		<-conn.Context().Done()
		closed <- context.Cause(conn.Context())
	})
	conn := dial(t, addr, pki.client)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := conn.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadUpdateStream(ctx, s, Limits{})
	if !errors.Is(err, ErrUnexpected) {
		t.Fatalf("ReadUpdateStream = %v, want ErrUnexpected", err)
	}
	_ = CloseConn(conn, err)
	select {
	case err := <-closed:
		if code, _, _ := CloseCode(err); code != CodeProtocolViolation {
			t.Errorf("distributor saw the connection end with %v, want CodeProtocolViolation", err)
		}
	case <-ctx.Done():
		t.Fatal("timed out")
	}
}

func TestWrongALPNRefused(t *testing.T) {
	pki := newTestPKI(t)
	addr := startListener(t, pki.server, func(ctx context.Context, conn *quic.Conn) {
		t.Error("a connection without ALPN lehr/1 was accepted")
	})
	client := pki.client.Clone()
	client.NextProtos = []string{"lehr/0"}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, client, ClientQUICConfig())
	if err == nil {
		_ = conn.CloseWithError(0, "")
		t.Fatal("dial with ALPN lehr/0 succeeded")
	}
}

// subscribeFrame is a well-formed Subscribe frame, which may not come
// before Hello.
func subscribeFrame(t *testing.T) []byte {
	b, err := AppendFrame(nil, &lehrpb.Subscribe{Namespaces: []*lehrpb.CachedNamespace{{Namespace: "demo/a"}}}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
