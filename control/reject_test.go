package control_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// TestRejections sends every kind of bad input and checks the error's code,
// reason and field, and that nothing was stored.
func TestRejections(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)

	createDomain(t, cl, "bad", &lehrpb.Quotas{MaxProperties: 5})
	createDomain(t, cl, "big", nil)
	createDomain(t, cl, "few", &lehrpb.Quotas{MaxNamespaces: 1})
	publish(t, cl, "bad/ns", prop("a", "", "1"), prop("b", "", "2"))
	publish(t, cl, "bad/ns", prop("a", "", "1"), prop("b", "", "3")) // latest is 2
	publish(t, cl, "big/ns", prop("a", "", "1"))
	publish(t, cl, "few/one", prop("a", "", "1"))
	if _, err := cl.CreateNamespace(ctx, &lehrpb.CreateNamespaceRequest{Namespace: &lehrpb.Namespace{
		Name:       "bad/schema",
		JsonSchema: `{"type": "object", "properties": {"port": {"type": "integer"}}, "required": ["port"]}`,
	}}); err != nil {
		t.Fatalf("CreateNamespace with schema: %v", err)
	}
	publish(t, cl, "bad/schema", prop("svc", "application/json", `{"port": 80}`))
	if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{
		Namespace: "bad/policy", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
		Properties: []*lehrpb.Property{prop("allow-admins", "application/json", `{"effect": "allow", "condition": "principal.role == 'admin'"}`)},
	}); err != nil {
		t.Fatalf("publish a valid policy: %v", err)
	}

	big := bytes.Repeat([]byte("x"), 512<<10) // exactly the value cap
	var over []*lehrpb.Property               // 17 MiB of values, each under the cap
	for i := range 34 {
		over = append(over, &lehrpb.Property{Key: fmt.Sprintf("k%02d", i), Value: big[:512<<10-8]})
	}
	six := []*lehrpb.Property{prop("p1", "", "x"), prop("p2", "", "x"), prop("p3", "", "x"), prop("p4", "", "x"), prop("p5", "", "x"), prop("p6", "", "x")}

	pub := func(ns string, ps ...*lehrpb.Property) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: ns, Properties: ps})
			return err
		}
	}
	patch := func(req *lehrpb.PatchRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			if req.Namespace == "" {
				req.Namespace = "bad/ns"
			}
			_, err := cl.Patch(ctx, req)
			return err
		}
	}

	tests := []struct {
		name   string
		call   func(context.Context) error
		code   codes.Code
		reason string
		field  string
		// limit, if set, must be the error's limit.
		limit string
	}{
		{"bad domain name", pub("Bad/ns", prop("a", "", "1")), codes.InvalidArgument, apierror.ReasonInvalidName, "namespace", ""},
		{"bad namespace name", pub("bad/NS!", prop("a", "", "1")), codes.InvalidArgument, apierror.ReasonInvalidName, "namespace", ""},
		{"namespace without domain", pub("justname", prop("a", "", "1")), codes.InvalidArgument, apierror.ReasonInvalidName, "namespace", ""},
		{"bad key", pub("bad/ns", prop("a", "", "1"), prop("../etc/passwd", "", "x")), codes.InvalidArgument, apierror.ReasonInvalidName, "properties[1].key", ""},
		{"empty key", pub("bad/ns", prop("", "", "x")), codes.InvalidArgument, apierror.ReasonInvalidName, "properties[0].key", ""},
		{"value over cap", pub("bad/ns", prop("a", "", "1"), &lehrpb.Property{Key: "huge", Value: append(big, 'x')}),
			codes.InvalidArgument, apierror.ReasonValueTooLarge, "properties[1].value", "524288 bytes"},
		{"namespace over cap", pub("big/ns", over...), codes.ResourceExhausted, apierror.ReasonNamespaceTooLarge, "properties", "16777216 bytes"},
		{"too many properties", pub("bad/ns", six...), codes.ResourceExhausted, apierror.ReasonTooManyProperties, "properties", "5 properties"},
		{"duplicate key in publish", pub("bad/ns", prop("a", "", "1"), prop("a", "", "2")), codes.InvalidArgument, apierror.ReasonDuplicateKey, "properties[1].key", ""},
		{"invalid JSON", pub("bad/ns", prop("a", "application/json", `{"rps": }`)), codes.InvalidArgument, apierror.ReasonInvalidContent, "properties[0].value", ""},
		{"invalid YAML", pub("bad/ns", prop("a", "", "1"), prop("y", "application/yaml", "a: [1, 2\nb: :")), codes.InvalidArgument, apierror.ReasonInvalidContent, "properties[1].value", ""},
		{"bad content type", pub("bad/ns", prop("a", "no-subtype", "1")), codes.InvalidArgument, apierror.ReasonInvalidContent, "properties[0].content_type", ""},
		{"JSON Schema violation", pub("bad/schema", prop("svc", "application/json", `{"port": "eighty"}`)), codes.InvalidArgument, apierror.ReasonValidationFailed, "properties[0].value", ""},
		{"JSON Schema violation in patch", patch(&lehrpb.PatchRequest{Namespace: "bad/schema", BaseVersion: 1, Set: []*lehrpb.Property{prop("other", "application/json", `{}`)}}),
			codes.InvalidArgument, apierror.ReasonValidationFailed, "set[0].value", ""},
		{"invalid CEL rule", pub("bad/policy", prop("ok", "application/json", `{"effect": "allow", "condition": "true"}`), prop("broken", "application/json", `{"effect": "deny", "condition": "request.path.startsWith("}`)),
			codes.InvalidArgument, apierror.ReasonValidationFailed, "properties[1].value", ""},
		{"unknown domain", pub("nodomain/ns", prop("a", "", "1")), codes.NotFound, apierror.ReasonNotFound, "namespace", ""},
		{"kind mismatch", func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "bad/ns", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: []*lehrpb.Property{prop("a", "", "1")}})
			return err
		}, codes.FailedPrecondition, apierror.ReasonKindMismatch, "kind", ""},
		{"stale expected_version", func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "bad/ns", ExpectedVersion: 1, Properties: []*lehrpb.Property{prop("a", "", "1")}})
			return err
		}, codes.FailedPrecondition, apierror.ReasonStaleVersion, "expected_version", ""},
		{"message too long", func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "bad/ns", Message: string(bytes.Repeat([]byte("m"), 1025)), Properties: []*lehrpb.Property{prop("a", "", "1")}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "message", "1024 bytes"},
		{"too many namespaces", pub("few/two", prop("a", "", "1")), codes.ResourceExhausted, apierror.ReasonTooManyNamespaces, "namespace", "1 namespaces"},
		{"request_id too long", func(ctx context.Context) error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "bad/ns", RequestId: string(bytes.Repeat([]byte("r"), 2<<20)), Properties: []*lehrpb.Property{prop("a", "", "1")}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "request_id", "128 bytes"},
		{"request_id with a control character", patch(&lehrpb.PatchRequest{BaseVersion: 2, RequestId: "abc\n", Set: []*lehrpb.Property{prop("a", "", "9")}}),
			codes.InvalidArgument, apierror.ReasonInvalidArgument, "request_id", ""},
		{"NaN quota", func(ctx context.Context) error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "nan", Quotas: &lehrpb.Quotas{PublishesPerSecond: math.NaN()}}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "domain.quotas.publishes_per_second", ""},
		{"unknown version", func(ctx context.Context) error {
			_, err := cl.Get(ctx, &lehrpb.GetRequest{Namespace: "bad/ns", Version: 99})
			return err
		}, codes.NotFound, apierror.ReasonNotFound, "version", ""},
		{"unknown namespace", func(ctx context.Context) error {
			_, err := cl.Get(ctx, &lehrpb.GetRequest{Namespace: "bad/nothing"})
			return err
		}, codes.NotFound, apierror.ReasonNotFound, "namespace", ""},
		{"missing key in get", func(ctx context.Context) error {
			_, err := cl.Get(ctx, &lehrpb.GetRequest{Namespace: "bad/ns", Keys: []string{"a", "zzz"}})
			return err
		}, codes.NotFound, apierror.ReasonMissingKey, "keys[1]", ""},
		{"rollback to unknown version", func(ctx context.Context) error {
			_, err := cl.Rollback(ctx, &lehrpb.RollbackRequest{Namespace: "bad/ns", ToVersion: 99})
			return err
		}, codes.NotFound, apierror.ReasonNotFound, "to_version", ""},
		{"patch without base", patch(&lehrpb.PatchRequest{Set: []*lehrpb.Property{prop("a", "", "9")}}), codes.InvalidArgument, apierror.ReasonInvalidArgument, "base_version", ""},
		{"empty patch", patch(&lehrpb.PatchRequest{BaseVersion: 2}), codes.InvalidArgument, apierror.ReasonEmptyPatch, "set", ""},
		{"duplicate keys in patch", patch(&lehrpb.PatchRequest{BaseVersion: 2, Set: []*lehrpb.Property{prop("c", "", "1"), prop("c", "", "2")}}),
			codes.InvalidArgument, apierror.ReasonDuplicateKey, "set[1].key", ""},
		{"key both set and deleted", patch(&lehrpb.PatchRequest{BaseVersion: 2, Set: []*lehrpb.Property{prop("a", "", "1")}, Delete: []string{"a"}}),
			codes.InvalidArgument, apierror.ReasonDuplicateKey, "delete[0]", ""},
		{"delete of a missing key", patch(&lehrpb.PatchRequest{BaseVersion: 2, Delete: []string{"b", "nope"}}),
			codes.InvalidArgument, apierror.ReasonMissingKey, "delete[1]", ""},
		{"bad key in patch", patch(&lehrpb.PatchRequest{BaseVersion: 2, Set: []*lehrpb.Property{prop("a b", "", "1")}}),
			codes.InvalidArgument, apierror.ReasonInvalidName, "set[0].key", ""},
		{"patch over property quota", patch(&lehrpb.PatchRequest{BaseVersion: 2, Set: six[:4]}),
			codes.ResourceExhausted, apierror.ReasonTooManyProperties, "set", "5 properties"},
		{"stale base", patch(&lehrpb.PatchRequest{BaseVersion: 1, Set: []*lehrpb.Property{prop("a", "", "9")}}),
			codes.FailedPrecondition, apierror.ReasonStaleVersion, "base_version", ""},
		{"base from the future", patch(&lehrpb.PatchRequest{BaseVersion: 7, Set: []*lehrpb.Property{prop("a", "", "9")}}),
			codes.FailedPrecondition, apierror.ReasonStaleVersion, "base_version", ""},
		{"invalid JSON Schema", func(ctx context.Context) error {
			_, err := cl.CreateNamespace(ctx, &lehrpb.CreateNamespaceRequest{Namespace: &lehrpb.Namespace{Name: "bad/badschema", JsonSchema: `{"type": 12}`}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "namespace.json_schema", ""},
		{"negative quota", func(ctx context.Context) error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "neg", Quotas: &lehrpb.Quotas{MaxValueBytes: -1}}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "domain.quotas.max_value_bytes", ""},
		{"bad domain name in CreateDomain", func(ctx context.Context) error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "-x"}})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidName, "domain.name", ""},
		{"domain exists", func(ctx context.Context) error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "bad"}})
			return err
		}, codes.AlreadyExists, apierror.ReasonAlreadyExists, "domain.name", ""},
		{"bad page token", func(ctx context.Context) error {
			_, err := cl.History(ctx, &lehrpb.HistoryRequest{Namespace: "bad/ns", PageToken: "garbage!"})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidArgument, "page_token", ""},
		{"bad zone name", func(ctx context.Context) error {
			_, err := cl.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: "Zone_1"})
			return err
		}, codes.InvalidArgument, apierror.ReasonInvalidName, "name", ""},
	}

	watched := []string{"bad/ns", "big/ns", "bad/schema", "bad/policy", "few/one"}
	absent := []string{"few/two", "nodomain/ns", "bad/badschema", "bad/nothing"}
	before := heads(t, cl, watched)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(testCtx(t))
			if err == nil {
				t.Fatalf("call succeeded; want %v %s on %s", tc.code, tc.reason, tc.field)
			}
			e := apierror.FromError(err)
			if e.Code != tc.code || e.Reason != tc.reason || e.Field != tc.field {
				t.Errorf("got %v %s on %q; want %v %s on %q (error: %v)", e.Code, e.Reason, e.Field, tc.code, tc.reason, tc.field, e)
			}
			if tc.limit != "" && e.Limit != tc.limit {
				t.Errorf("limit = %q, want %q", e.Limit, tc.limit)
			}
			if e.Message == "" {
				t.Errorf("error has no message saying what is wrong")
			}
			if e.Reason == apierror.ReasonStaleVersion && e.CurrentVersion != 2 {
				t.Errorf("stale version error names current version %d, want 2", e.CurrentVersion)
			}
		})
	}

	// Nothing was stored.
	after := heads(t, cl, watched)
	for _, ns := range watched {
		if before[ns] != after[ns] {
			t.Errorf("%s changed by rejected requests: %s, then %s", ns, before[ns], after[ns])
		}
	}
	for _, ns := range absent {
		if _, err := cl.GetNamespace(testCtx(t), &lehrpb.GetNamespaceRequest{Name: ns}); apierror.FromError(err).Code != codes.NotFound {
			t.Errorf("namespace %s exists after rejected requests (GetNamespace: %v)", ns, err)
		}
	}
	if _, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "neg"}); apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("domain neg exists after a rejected CreateDomain (GetDomain: %v)", err)
	}
}

// heads describes each namespace's latest version and history length.
func heads(t *testing.T, cl lehrpb.ControlClient, nss []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range nss {
		n, err := cl.GetNamespace(testCtx(t), &lehrpb.GetNamespaceRequest{Name: ns})
		if err != nil {
			t.Fatalf("GetNamespace(%s): %v", ns, err)
		}
		out[ns] = fmt.Sprintf("latest %d %s, %d versions in history", n.GetLatestVersion(), n.GetLatestChecksum(), len(history(t, cl, ns, 0)))
	}
	return out
}

func TestRateLimit(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	// One publish per ~3 hours, burst 2: the third publish is refused.
	createDomain(t, cl, "slow", &lehrpb.Quotas{PublishesPerSecond: 0.0001, PublishBurst: 2})
	publish(t, cl, "slow/a", prop("k", "", "1"))
	publish(t, cl, "slow/a", prop("k", "", "2"))
	_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "slow/a", Properties: []*lehrpb.Property{prop("k", "", "3")}})
	e := apierror.FromError(err)
	if e == nil || e.Code != codes.ResourceExhausted || e.Reason != apierror.ReasonRateLimited || !e.Retryable() {
		t.Fatalf("third publish: %v; want retryable RESOURCE_EXHAUSTED RATE_LIMITED", err)
	}
	if got := len(history(t, cl, "slow/a", 0)); got != 2 {
		t.Errorf("history holds %d versions, want 2", got)
	}
	// Other domains are not affected.
	createDomain(t, cl, "fast", nil)
	for i := range 3 {
		publish(t, cl, "fast/a", prop("k", "", fmt.Sprint(i)))
	}
}

// The publish rate of a domain holds across control replicas (issue 12,
// the probe's finding: two replicas allowed twice the rate): two replicas
// on one etcd draw on one budget, so burst 2 admits two publishes in all,
// not two through each.
func TestRateLimitAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	a := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	b := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	createDomain(t, a.Client, "slow", &lehrpb.Quotas{PublishesPerSecond: 0.0001, PublishBurst: 2})
	accepted := 0
	for i := range 6 {
		cl := []lehrpb.ControlClient{a.Client, b.Client}[i%2]
		_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "slow/a", Properties: []*lehrpb.Property{prop("k", "", fmt.Sprint(i))}})
		switch e := apierror.FromError(err); {
		case err == nil:
			accepted++
		case e.Code != codes.ResourceExhausted || e.Reason != apierror.ReasonRateLimited:
			t.Fatalf("publish %d: %v; want success or RATE_LIMITED", i, err)
		}
	}
	if accepted != 2 {
		t.Errorf("%d of 6 publishes through two replicas accepted; the domain's burst is 2 in all", accepted)
	}
}

// A NaN or infinite quota is refused for what it is, not as "negative"
// (issue 8, defect 14).
func TestNaNQuotaMessage(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	for _, r := range []float64{math.NaN(), math.Inf(1)} {
		_, err := srv.Client.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "q", Quotas: &lehrpb.Quotas{PublishesPerSecond: r}}})
		if e := apierror.FromError(err); e == nil || !strings.Contains(e.Message, "finite number") || strings.Contains(e.Message, "negative") {
			t.Errorf("publishes_per_second %v: %v; want a message asking for a finite number", r, err)
		}
	}
}
