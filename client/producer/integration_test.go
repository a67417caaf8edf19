package producer_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// testTimeout bounds each call in these tests; generous for a loaded machine.
const testTimeout = 60 * time.Second

func newClient(t *testing.T, addr string, opts producer.Options) *producer.Client {
	t.Helper()
	opts.Address = addr
	if opts.Author == "" {
		opts.Author = "tester"
	}
	if opts.Logger == nil {
		opts.Logger = controltest.Logger(t, 0)
	}
	c, err := producer.New(opts)
	if err != nil {
		t.Fatalf("producer.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func jsonP(k, v string) producer.Property {
	return producer.Property{Key: k, Value: []byte(v), ContentType: "application/json"}
}

func TestRoundTrip(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := newClient(t, srv.Addr, producer.Options{Author: "alice"})
	ctx := ctxT(t)

	d, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: "demo", Description: "test"})
	if err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	if d.GetCreateTime() == nil {
		t.Errorf("CreateDomain returned no create_time: %v", d)
	}
	if d.GetCreatedBy() != "alice" {
		t.Errorf("CreateDomain created_by = %q, want the client's Author %q", d.GetCreatedBy(), "alice")
	}
	if _, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: "demo"}); !errors.Is(err, producer.ErrAlreadyExists) {
		t.Errorf("CreateDomain twice: %v, want ErrAlreadyExists", err)
	}
	if _, err := c.CreateZone(ctx, "zone-a"); err != nil {
		t.Fatalf("CreateZone: %v", err)
	}

	v1, err := c.Publish(ctx, "demo/app", []producer.Property{
		jsonP("limits/rps", "100"),
		{Key: "greeting", Value: []byte("hello"), ContentType: "text/plain"},
		jsonP("features", `{"dark_mode":false}`),
	}, producer.WithMessage("first cut"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if v1.GetSeq() != 1 || v1.GetAuthor() != "alice" || v1.GetMessage() != "first cut" {
		t.Errorf("Publish = seq %d author %q message %q, want 1, alice, first cut", v1.GetSeq(), v1.GetAuthor(), v1.GetMessage())
	}

	got, err := c.Get(ctx, "demo/app")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if err := got.Verify(); err != nil {
		t.Errorf("Verify latest: %v", err)
	}
	if got.Info.GetChecksum() != v1.GetChecksum() {
		t.Errorf("Get checksum %s, Publish returned %s", got.Info.GetChecksum(), v1.GetChecksum())
	}
	if diff := cmp.Diff([]string{"features", "greeting", "limits/rps"}, keys(got.Properties)); diff != "" {
		t.Errorf("Get keys mismatch (-want +got):\n%s", diff)
	}

	v2, err := c.Patch(ctx, "demo/app", 1, producer.Patch{
		Set:    []producer.Property{jsonP("limits/rps", "250")},
		Delete: []string{"greeting"},
	}, producer.WithMessage("more headroom"))
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if v2.GetSeq() != 2 || v2.GetParent() != 1 || v2.GetSource() != lehrpb.VersionSource_VERSION_SOURCE_PATCH {
		t.Errorf("Patch = %v, want seq 2, parent 1, source patch", v2)
	}

	part, err := c.Get(ctx, "demo/app", producer.Keys("limits/rps"))
	if err != nil {
		t.Fatalf("Get(Keys): %v", err)
	}
	if p, ok := part.Lookup("limits/rps"); !ok || string(p.Value) != "250" || len(part.Properties) != 1 || !part.Partial {
		t.Errorf("Get(Keys(limits/rps)) = %+v, want only limits/rps = 250, partial", part)
	}
	if err := part.Verify(); err == nil {
		t.Errorf("Verify of a partial read succeeded, want an error")
	}

	diff, err := c.Diff(ctx, "demo/app", 1, 2)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	var summary []string
	for _, ch := range diff.Changes {
		switch {
		case ch.Old == nil:
			summary = append(summary, "+"+ch.Key)
		case ch.New == nil:
			summary = append(summary, "-"+ch.Key+"="+string(ch.Old.Value))
		default:
			summary = append(summary, "~"+ch.Key+"="+string(ch.Old.Value)+">"+string(ch.New.Value))
		}
	}
	if d := cmp.Diff([]string{"-greeting=hello", "~limits/rps=100>250"}, summary); d != "" {
		t.Errorf("Diff(1, 2) mismatch (-want +got):\n%s", d)
	}

	v3, err := c.Rollback(ctx, "demo/app", 1, producer.WithMessage("back out"), producer.WithExpectedVersion(2))
	if err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if v3.GetSeq() != 3 || v3.GetRollbackOf() != 1 || v3.GetChecksum() != v1.GetChecksum() {
		t.Errorf("Rollback = %v, want seq 3 rolling back to 1 with v1's checksum %s", v3, v1.GetChecksum())
	}

	var hist []uint64
	for v, err := range c.History(ctx, "demo/app") {
		if err != nil {
			t.Fatalf("History: %v", err)
		}
		hist = append(hist, v.GetSeq())
	}
	if d := cmp.Diff([]uint64{3, 2, 1}, hist); d != "" {
		t.Errorf("History mismatch (-want +got):\n%s", d)
	}
	page, next, err := c.HistoryPage(ctx, "demo/app", 2, "")
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("HistoryPage(size 2) = %d versions, next %q, err %v; want 2 and a token", len(page), next, err)
	}
	page, next, err = c.HistoryPage(ctx, "demo/app", 2, next)
	if err != nil || len(page) != 1 || page[0].GetSeq() != 1 || next != "" {
		t.Fatalf("HistoryPage(second) = %v, next %q, err %v; want version 1 and no token", page, next, err)
	}

	ns, err := c.GetNamespace(ctx, "demo/app")
	if err != nil || ns.GetLatestVersion() != 3 {
		t.Errorf("GetNamespace = %v, %v; want latest version 3", ns, err)
	}
	nss, err := c.ListNamespaces(ctx, "demo")
	if err != nil || len(nss) != 1 || nss[0].GetName() != "demo/app" {
		t.Errorf("ListNamespaces = %v, %v; want [demo/app]", nss, err)
	}
	ds, err := c.ListDomains(ctx)
	if err != nil || len(ds) != 1 || ds[0].GetName() != "demo" {
		t.Errorf("ListDomains = %v, %v; want [demo]", ds, err)
	}
	zs, err := c.ListZones(ctx)
	if err != nil || len(zs) != 1 || zs[0].GetName() != "zone-a" {
		t.Errorf("ListZones = %v, %v; want [zone-a]", zs, err)
	}
	goals, err := c.GetGoals(ctx, "zone-a", "")
	if err != nil {
		t.Fatalf("GetGoals: %v", err)
	}
	if len(goals.GetGoals()) != 1 || goals.GetGoals()[0].GetVersion() != 3 {
		t.Errorf("GetGoals = %v, want demo/app at 3", goals.GetGoals())
	}
}

func keys(ps []producer.Property) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Key)
	}
	return out
}

func setup(t *testing.T, c *producer.Client) context.Context {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: "demo"}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	if _, err := c.Publish(ctx, "demo/app", []producer.Property{jsonP("a", "1")}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return ctx
}

func TestTypedErrors(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	c := newClient(t, srv.Addr, producer.Options{})
	ctx := setup(t, c)
	if _, err := c.Patch(ctx, "demo/app", 1, producer.Patch{Set: []producer.Property{jsonP("a", "2")}}); err != nil {
		t.Fatalf("Patch: %v", err)
	}

	t.Run("conflict", func(t *testing.T) {
		_, err := c.Patch(ctx, "demo/app", 1, producer.Patch{Set: []producer.Property{jsonP("a", "3")}})
		var perr *producer.Error
		if !errors.Is(err, producer.ErrConflict) || !errors.As(err, &perr) {
			t.Fatalf("stale Patch error = %v, want ErrConflict", err)
		}
		if perr.CurrentVersion != 2 {
			t.Errorf("CurrentVersion = %d, want 2", perr.CurrentVersion)
		}
		if !errors.Is(err, producer.ErrPrecondition) {
			t.Errorf("conflict does not match ErrPrecondition")
		}
		_, err = c.Publish(ctx, "demo/app", nil, producer.WithExpectedVersion(1))
		if !errors.As(err, &perr) || !errors.Is(err, producer.ErrConflict) || perr.CurrentVersion != 2 {
			t.Errorf("Publish(expected 1) error = %v, want ErrConflict with current version 2", err)
		}
	})

	t.Run("value too large", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 600<<10)
		_, err := c.Publish(ctx, "demo/app", []producer.Property{jsonP("a", "1"), {Key: "big", Value: big}})
		var perr *producer.Error
		if !errors.As(err, &perr) {
			t.Fatalf("Publish(600 KiB value) error = %v, want *producer.Error", err)
		}
		// docs/design.md, "Limits": a value over the cap is INVALID_ARGUMENT.
		if !errors.Is(err, producer.ErrInvalid) || perr.Reason != apierror.ReasonValueTooLarge {
			t.Errorf("error = %v, want InvalidArgument %s", err, apierror.ReasonValueTooLarge)
		}
		if perr.Field != "properties[1].value" || perr.Limit == "" {
			t.Errorf("Field %q Limit %q, want properties[1].value and a limit", perr.Field, perr.Limit)
		}
		if perr.Retryable() {
			t.Errorf("a too-large value is retryable; want not")
		}
	})

	t.Run("not found and invalid", func(t *testing.T) {
		if _, err := c.GetDomain(ctx, "nosuch"); !errors.Is(err, producer.ErrNotFound) {
			t.Errorf("GetDomain(nosuch) = %v, want ErrNotFound", err)
		}
		if _, err := c.Get(ctx, "demo/app", producer.AtVersion(99)); !errors.Is(err, producer.ErrNotFound) {
			t.Errorf("Get(version 99) = %v, want ErrNotFound", err)
		}
		_, err := c.Publish(ctx, "demo/app", []producer.Property{{Key: "../etc", Value: []byte("x")}})
		var perr *producer.Error
		if !errors.Is(err, producer.ErrInvalid) || !errors.As(err, &perr) || perr.Field != "properties[0].key" {
			t.Errorf("Publish(bad key) = %v, want ErrInvalid on properties[0].key", err)
		}
		if _, err := c.Patch(ctx, "demo/app", 2, producer.Patch{}, producer.WithKind(lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY)); !errors.Is(err, producer.ErrInvalid) {
			t.Errorf("Patch(WithKind) = %v, want a client-side ErrInvalid", err)
		}
	})

	// Nothing above stored a version.
	ns, err := c.GetNamespace(ctx, "demo/app")
	if err != nil || ns.GetLatestVersion() != 2 {
		t.Errorf("after rejections GetNamespace = %v, %v; want latest version 2", ns, err)
	}
}

// lossyPublish drops the response of the first Publish and Patch call after
// the server has committed it, as a network failure after the commit would,
// and records every request_id the client sent.
type lossyPublish struct {
	mu      sync.Mutex
	dropped map[string]bool
	ids     map[string][]string
}

func (l *lossyPublish) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var id string
	switch r := req.(type) {
	case *lehrpb.PublishRequest:
		id = r.GetRequestId()
	case *lehrpb.PatchRequest:
		id = r.GetRequestId()
	default:
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids[method] = append(l.ids[method], id)
	if err == nil && !l.dropped[method] {
		l.dropped[method] = true
		proto.Reset(reply.(proto.Message))
		return status.Error(codes.Unavailable, "injected: response lost after commit")
	}
	return err
}

func TestRetryAfterLostResponseDoesNotDuplicate(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	lossy := &lossyPublish{dropped: map[string]bool{}, ids: map[string][]string{}}
	c := newClient(t, srv.Addr, producer.Options{
		Retry:       producer.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(lossy.intercept)},
	})
	ctx := ctxT(t)
	if _, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: "demo"}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}

	v, err := c.Publish(ctx, "demo/app", []producer.Property{jsonP("a", "1")})
	if err != nil {
		t.Fatalf("Publish through a lost response: %v", err)
	}
	if v.GetSeq() != 1 {
		t.Errorf("Publish returned version %d, want 1 (the committed one)", v.GetSeq())
	}
	v, err = c.Patch(ctx, "demo/app", 1, producer.Patch{Set: []producer.Property{jsonP("a", "2")}})
	if err != nil {
		t.Fatalf("Patch through a lost response: %v", err)
	}
	if v.GetSeq() != 2 {
		t.Errorf("Patch returned version %d, want 2", v.GetSeq())
	}

	lossy.mu.Lock()
	for method, ids := range lossy.ids {
		if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] {
			t.Errorf("%s request ids %q: want two attempts with one non-empty id", method, ids)
		}
	}
	if len(lossy.ids) != 2 {
		t.Errorf("intercepted %d methods, want Publish and Patch", len(lossy.ids))
	}
	lossy.mu.Unlock()

	var hist []uint64
	for v, err := range c.History(ctx, "demo/app") {
		if err != nil {
			t.Fatalf("History: %v", err)
		}
		hist = append(hist, v.GetSeq())
	}
	if d := cmp.Diff([]uint64{2, 1}, hist); d != "" {
		t.Errorf("history after retries (-want +got):\n%s", d)
	}

	// An explicit request id makes two separate calls one version.
	a, err := c.Publish(ctx, "demo/app", []producer.Property{jsonP("a", "3")}, producer.WithRequestID("ci-run-17"))
	if err != nil {
		t.Fatalf("Publish(WithRequestID): %v", err)
	}
	b, err := c.Publish(ctx, "demo/app", []producer.Property{jsonP("a", "3")}, producer.WithRequestID("ci-run-17"))
	if err != nil {
		t.Fatalf("Publish(WithRequestID) again: %v", err)
	}
	if a.GetSeq() != 3 || b.GetSeq() != 3 {
		t.Errorf("two publishes with one request id = versions %d and %d, want 3 and 3", a.GetSeq(), b.GetSeq())
	}
}

func TestUnavailableAfterRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := newClient(t, addr, producer.Options{Retry: producer.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}})
	_, err = c.ListDomains(ctxT(t))
	var perr *producer.Error
	if !errors.Is(err, producer.ErrUnavailable) || !errors.As(err, &perr) || !perr.Retryable() {
		t.Errorf("ListDomains with nothing listening = %v, want a retryable ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.ListDomains(ctx); !errors.Is(err, producer.ErrCanceled) {
		t.Errorf("ListDomains with a canceled context = %v, want ErrCanceled", err)
	}
}

// TestUpdateExperimentOnOldControl checks that an experiment update that
// names one field replaces only that field on a control that predates
// update_mask as a FieldMask: such a control does not know the field
// (here, the interceptor drops it on the way) and reads the paths the
// client also sends the old way, legacy_update_mask; without them it
// would replace the rules too.
func TestUpdateExperimentOnOldControl(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	for _, old := range []bool{false, true} {
		name := "current control"
		if old {
			name = "old control"
		}
		t.Run(name, func(t *testing.T) {
			asOld := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if r, ok := req.(*lehrpb.UpdatePolicyExperimentRequest); ok && old {
					r = proto.CloneOf(r)
					r.UpdateMask = nil
					req = r
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			c := newClient(t, srv.Addr, producer.Options{DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(asOld)}})
			ctx := ctxT(t)
			domain := "old"
			if !old {
				domain = "current"
			}
			if _, err := c.CreateDomain(ctx, &lehrpb.Domain{Name: domain}); err != nil {
				t.Fatalf("CreateDomain: %v", err)
			}
			ns := domain + "/fw"
			rule := jsonP("all", `{"effect": "allow", "condition": "true"}`)
			if _, err := c.Publish(ctx, ns, []producer.Property{rule}, producer.WithKind(lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY)); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if _, err := c.CreateExperiment(ctx, ns, "e1", []producer.Property{rule}, nil); err != nil {
				t.Fatalf("CreateExperiment: %v", err)
			}
			e, err := c.UpdateExperiment(ctx, ns, "e1", false, nil, map[string]string{"v": "2"}, "")
			if err != nil {
				t.Fatalf("UpdateExperiment(annotations): %v", err)
			}
			if n := len(e.GetPolicy().GetRules()); n != 1 || e.GetAnnotations()["v"] != "2" {
				t.Errorf("after updating the annotations: %d rules, annotations %v; want the 1 rule kept and v=2", n, e.GetAnnotations())
			}
		})
	}
}
