package control_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// Tests of issue 26, item 3: every byte control stores is accounted for.

// startWithEtcd starts control on an etcd the test can read directly.
func startWithEtcd(t *testing.T) (*controltest.Server, *clientv3.Client) {
	t.Helper()
	etcd, err := embedetcd.Start(testCtx(t), embedetcd.Options{Dir: t.TempDir(), Logger: controltest.Logger(t, slog.LevelWarn), NoSync: true})
	if err != nil {
		t.Fatalf("embedetcd.Start: %v", err)
	}
	t.Cleanup(func() { etcd.Close() })
	srv := controltest.StartControl(t, control.Options{EtcdEndpoints: etcd.Endpoints()})
	cli, err := etcd.Client(testCtx(t))
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

// storedBytes returns the bytes of every value control stored, and the
// keys of those that contain marker.
func storedBytes(t *testing.T, cli *clientv3.Client, marker []byte) (total int, holding []string) {
	t.Helper()
	resp, err := cli.Get(testCtx(t), "/lehr/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("etcd get: %v", err)
	}
	for _, kv := range resp.Kvs {
		total += len(kv.Value)
		if bytes.Contains(kv.Value, marker) {
			holding = append(holding, string(kv.Key))
		}
	}
	return total, holding
}

// Unknown protobuf fields a client sends are dropped before anything is
// stored. On the main, CreateDomain and SetRolloutPolicy stored
// them: a user with no rights stored 20 domains carrying 1 MiB of junk
// each in 1.2 s. Here every message of every request that stores part of
// itself — the domain and its ACL and quotas, a rollout policy and its
// freeze windows, an experiment's rules, an evaluation's trials and
// analysis — carries 64 KiB of junk, and none of it is stored.
func TestUnknownFieldsAreNotStored(t *testing.T) {
	srv, cli := startWithEtcd(t)
	cl := srv.Client
	ctx := testCtx(t)
	const junkBytes = 64 << 10
	marker := []byte("lehr-test-junk/")
	field := protowire.AppendTag(nil, 9999, protowire.BytesType)
	field = protowire.AppendBytes(field, bytes.Repeat(marker, junkBytes/len(marker)))
	junk := func(ms ...proto.Message) {
		for _, m := range ms {
			m.ProtoReflect().SetUnknown(field)
		}
	}
	before, _ := storedBytes(t, cli, marker)

	dom := &lehrpb.Domain{Name: "junk", Acl: &lehrpb.Acl{Publishers: []string{"pat"}}, Quotas: &lehrpb.Quotas{MaxNamespaces: 5}}
	creq := &lehrpb.CreateDomainRequest{Domain: dom}
	junk(creq, dom, dom.Acl, dom.Quotas)
	if _, err := cl.CreateDomain(ctx, creq); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}

	win := &lehrpb.FreezeWindow{Reason: "weekend", Weekly: &lehrpb.WeeklyWindow{Days: []string{"sat"}, At: "00:00", Length: durationpb.New(24 * time.Hour)}}
	pol := &lehrpb.RolloutPolicy{GlobalBlast: true, FreezeWindows: []*lehrpb.FreezeWindow{win}}
	preq := &lehrpb.SetRolloutPolicyRequest{Scope: "junk", Policy: pol}
	junk(preq, pol, win, win.Weekly, win.Weekly.Length)
	if _, err := cl.SetRolloutPolicy(ctx, preq); err != nil {
		t.Fatalf("SetRolloutPolicy: %v", err)
	}

	if _, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "junk/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
		Properties: []*lehrpb.Property{ruleProp("allow/all", "allow", "true")}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	rule := ruleProp("deny/all", "deny", "true")
	exp := &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: "domains/junk/policies/fw", Rules: []*lehrpb.Property{rule}}}
	ereq := &lehrpb.CreatePolicyExperimentRequest{Parent: "domains/junk/policies/fw", PolicyExperimentId: "x", PolicyExperiment: exp}
	junk(ereq, exp, exp.Policy, rule)
	if _, err := cl.CreatePolicyExperiment(ctx, ereq); err != nil {
		t.Fatalf("CreatePolicyExperiment: %v", err)
	}

	trial := &lehrpb.CanaryTrial{Zone: "zone-a", CanaryHosts: []string{"h1"}}
	cfg := &lehrpb.CanaryAnalysis{Checks: []*lehrpb.CanaryCheck{{Name: "errors", Metric: "apply_errors"}}}
	vreq := &lehrpb.EvaluateRequest{Name: "manual", Namespace: "junk/fw", Version: 1, Trials: []*lehrpb.CanaryTrial{trial},
		Config: cfg, ChangeTime: timestamppb.Now(), Bake: durationpb.New(time.Minute)}
	junk(vreq, trial, cfg, cfg.Checks[0], vreq.ChangeTime)
	if _, err := cl.Evaluate(ctx, vreq); err != nil {
		t.Fatalf("Evaluate: %v", err)
	}

	after, holding := storedBytes(t, cli, marker)
	if len(holding) > 0 {
		t.Errorf("stored values holding the junk: %v", holding)
	}
	// 18 messages carried 64 KiB each; what was stored is a few KiB.
	if grew := after - before; grew > 32<<10 {
		t.Errorf("the store grew by %d bytes; want the few KiB of the requests' known fields", grew)
	}
	d, err := cl.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "junk"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.ProtoReflect().GetUnknown()) + len(d.GetAcl().ProtoReflect().GetUnknown()) + len(d.GetQuotas().ProtoReflect().GetUnknown()); n > 0 {
		t.Errorf("GetDomain returns %d bytes of unknown fields; want none", n)
	}
	// What the requests said is kept.
	if d.GetQuotas().GetMaxNamespaces() != 5 || len(d.GetAcl().GetPublishers()) != 1 {
		t.Errorf("GetDomain = %v; want the known fields as sent", d)
	}
	var m bytes.Buffer
	srv.Control.Metrics().WritePrometheus(&m)
	for _, method := range []string{"CreateDomain", "SetRolloutPolicy", "CreatePolicyExperiment", "Evaluate"} {
		if want := `lehr_control_unknown_fields_dropped_total{method="` + method + `"} 1`; !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A refused call quotes at most a bounded prefix of what it was sent, in
// its error and in its audit record. On the main a publish refused
// for a 100 KiB key echoed the key into a 102 KB audit record, and three
// times into the error's status (message, ErrorInfo, BadRequest).
func TestRefusalsQuoteBoundedInput(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "pay", nil)
	big := strings.Repeat("k", 100<<10)
	ok := []*lehrpb.Property{prop("k", "", "v")}
	calls := []struct {
		name string
		call func() error
	}{
		{"key", func() error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/a", Properties: []*lehrpb.Property{prop(big, "", "v")}})
			return err
		}},
		{"namespace", func() error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/" + big, Properties: ok})
			return err
		}},
		{"author and message", func() error {
			_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/a", Properties: ok, Author: big, Message: big})
			return err
		}},
		{"domain", func() error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: big}})
			return err
		}},
		{"acl entry", func() error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "acl", Acl: &lehrpb.Acl{Publishers: []string{big}}}})
			return err
		}},
		{"scope", func() error {
			_, err := cl.SetRolloutPolicy(ctx, &lehrpb.SetRolloutPolicyRequest{Scope: big, Policy: &lehrpb.RolloutPolicy{GlobalBlast: true}})
			return err
		}},
		{"experiment name", func() error {
			_, err := cl.DeletePolicyExperiment(ctx, &lehrpb.DeletePolicyExperimentRequest{Name: big})
			return err
		}},
	}
	const maxStatus = 4 << 10 // what a refusal may cost on the wire
	for _, c := range calls {
		err := c.call()
		if err == nil {
			t.Fatalf("%s of 100 KiB: accepted", c.name)
		}
		if n := proto.Size(status.Convert(err).Proto()); n > maxStatus {
			t.Errorf("%s of 100 KiB: the error's status is %d bytes; want at most %d", c.name, n, maxStatus)
		}
		if e := apierror.FromError(err); strings.Contains(e.Message, big[:1000]) {
			t.Errorf("%s of 100 KiB: the message quotes 1,000 bytes of it or more: %.200s…", c.name, e.Message)
		}
	}
	// The message still says what was wrong with the key, and how long it was.
	_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "pay/a", Properties: []*lehrpb.Property{prop(big, "", "v")}})
	if e := apierror.FromError(err); e.Field != "properties[0].key" || !strings.Contains(e.Message, `kkk…" (102400 bytes)`) {
		t.Errorf("key of 100 KiB: %v; want a message quoting its start and its length, on properties[0].key", err)
	}

	// The domain, then every call above and the repeated key: refusals
	// alike within a second are folded into one record with a count
	// (AuditRecord.repeats), written when the second is over.
	var resp *lehrpb.ListAuditRecordsResponse
	wait.Until(t, "every call in the audit log", func() error {
		var err error
		if resp, err = cl.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{}); err != nil {
			return err
		}
		n, refused := 0, 0
		for _, r := range resp.GetRecords() {
			n += 1 + int(r.GetRepeats())
			if r.GetCode() != "OK" {
				refused += 1 + int(r.GetRepeats())
			}
		}
		if want := 1 + len(calls) + 1; n != want || refused != want-1 {
			return fmt.Errorf("%d calls recorded, %d of them refusals; want %d and %d", n, refused, want, want-1)
		}
		return nil
	})
	const maxRecord = 8 << 10
	for _, r := range resp.GetRecords() {
		if n := proto.Size(r); n > maxRecord {
			t.Errorf("audit record of %s %.60s… is %d bytes; want at most %d", r.GetMethod(), r.GetTarget(), n, maxRecord)
		}
	}
}

// Every list a caller sends control is bounded: beyond the bound the call
// is refused with INVALID_ARGUMENT naming the field, the count and the
// limit, and nothing is stored. On the main a domain with 10,000
// publishers was accepted.
func TestRepeatedFieldsAreBounded(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	users := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("user-%d", i)
		}
		return out
	}
	zones := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("zone-%d", i)
		}
		return out
	}
	hosts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("host-%d", i)
		}
		return out
	}

	// At the bounds (docs/design.md, "Limits"): accepted.
	wide := &lehrpb.Acl{Publishers: users(256), Operators: users(256), Admins: users(256), Readers: zones(1000)}
	if _, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "wide", Acl: wide}}); err != nil {
		t.Fatalf("CreateDomain with every ACL list at its bound: %v", err)
	}
	publish(t, cl, "wide/a", prop("k", "", "v"))

	evaluate := func(trials ...*lehrpb.CanaryTrial) error {
		_, err := cl.Evaluate(ctx, &lehrpb.EvaluateRequest{Name: "manual", Namespace: "wide/a", Version: 1, Trials: trials,
			ChangeTime: timestamppb.Now(), Bake: durationpb.New(time.Minute)})
		return err
	}
	var manyTrials []*lehrpb.CanaryTrial
	for _, z := range zones(101) {
		manyTrials = append(manyTrials, &lehrpb.CanaryTrial{Zone: z})
	}
	for _, tc := range []struct {
		name, field, limit string
		call               func() error
	}{
		{"10,000 publishers", "domain.acl.publishers", "256 entries", func() error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "many", Acl: &lehrpb.Acl{Publishers: users(10000)}}})
			return err
		}},
		{"257 operators", "domain.acl.operators", "256 entries", func() error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "many", Acl: &lehrpb.Acl{Operators: users(257)}}})
			return err
		}},
		{"1,001 readers", "domain.acl.readers", "1000 entries", func() error {
			_, err := cl.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "many", Acl: &lehrpb.Acl{Readers: zones(1001)}}})
			return err
		}},
		{"257 admins by update", "domain.acl.admins", "256 entries", func() error {
			_, err := cl.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "wide", Acl: &lehrpb.Acl{Admins: users(257)}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}})
			return err
		}},
		{"an update mask of 4 paths", "update_mask.paths", "3 entries", func() error {
			_, err := cl.UpdateDomain(ctx, &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "wide"},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl", "acl", "acl", "acl"}}})
			return err
		}},
		{"an experiment update mask of 5", "update_mask.paths", "4 entries", func() error {
			_, err := cl.UpdatePolicyExperiment(ctx, &lehrpb.UpdatePolicyExperimentRequest{
				PolicyExperiment: &lehrpb.PolicyExperiment{Name: "domains/wide/policies/fw/experiments/x"},
				UpdateMask:       &fieldmaskpb.FieldMask{Paths: []string{"*", "*", "*", "*", "*"}}})
			return err
		}},
		{"an old client's experiment update mask of 5", "legacy_update_mask", "4 entries", func() error {
			_, err := cl.UpdatePolicyExperiment(ctx, &lehrpb.UpdatePolicyExperimentRequest{
				PolicyExperiment: &lehrpb.PolicyExperiment{Name: "domains/wide/policies/fw/experiments/x"},
				LegacyUpdateMask: []string{"*", "*", "*", "*", "*"}})
			return err
		}},
		{"10,001 keys read", "keys", "10000 entries", func() error {
			keys := make([]string, 10001)
			for i := range keys {
				keys[i] = "k"
			}
			_, err := cl.Get(ctx, &lehrpb.GetRequest{Namespace: "wide/a", Keys: keys})
			return err
		}},
		{"101 trials", "trials", "100 entries", func() error { return evaluate(manyTrials...) }},
		{"1,001 trial hosts", "trials[1].control_hosts", "1000 entries", func() error {
			return evaluate(&lehrpb.CanaryTrial{Zone: "zone-a", CanaryHosts: hosts(600)}, &lehrpb.CanaryTrial{Zone: "zone-b", ControlHosts: hosts(401)})
		}},
		{"a 256-byte host id", "trials[0].canary_hosts[1]", "255 bytes", func() error {
			return evaluate(&lehrpb.CanaryTrial{Zone: "zone-a", CanaryHosts: []string{"h", strings.Repeat("h", 256)}})
		}},
		{"a zone in two trials", "trials[1].zone", "", func() error {
			return evaluate(&lehrpb.CanaryTrial{Zone: "zone-a"}, &lehrpb.CanaryTrial{Zone: "zone-a"})
		}},
	} {
		err := tc.call()
		e := apierror.FromError(err)
		if err == nil || e.Code != codes.InvalidArgument || e.Field != tc.field || e.Limit != tc.limit {
			t.Errorf("%s: %v; want INVALID_ARGUMENT on %s with limit %q", tc.name, err, tc.field, tc.limit)
		}
	}
	if _, err := cl.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "many"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetDomain(many) after the refusals: %v; want NOT_FOUND", err)
	}
	d, err := cl.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "wide"})
	if err != nil || len(d.GetAcl().GetAdmins()) != 256 {
		t.Errorf("GetDomain(wide) after the refused update: %v, %v; want its 256 admins unchanged", d, err)
	}
	evs, err := cl.ListCanaryEvaluations(ctx, &lehrpb.ListCanaryEvaluationsRequest{Namespace: "wide/a"})
	if err != nil || len(evs.GetEvaluations()) != 0 {
		t.Errorf("evaluations after the refusals: %v, %v; want none", evs, err)
	}
}

// A policy rule over the evaluation cost limit on every evaluation is
// refused at publish, naming the rule, its estimated cost and the limit.
// On the main it was accepted and denied everything at the hosts.
// Ordinary rules, and rules that are costly on some inputs only, pass.
func TestCostlyRuleRefusedAtPublish(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	ctx := testCtx(t)
	createDomain(t, cl, "shop", nil)
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	l := "[" + strings.Join(items, ",") + "]"
	costly := ruleProp("deny/costly", "deny", l+".map(x, "+l+".map(y, x * y)).size() > 0")
	ordinary := []*lehrpb.Property{
		ruleProp("allow/admins", "allow", "'admin' in principal.groups"),
		ruleProp("deny/off-hours", "deny", "now.getHours('UTC') < 6 && request.method != 'GET'"),
		ruleProp("allow/listed", "allow", "request.items.all(x, request.items.all(y, x != y))"),
		ruleProp("allow/known", "allow", "request.n in "+l),
	}
	wantRefused := func(what string, err error, field string) {
		t.Helper()
		e := apierror.FromError(err)
		if err == nil || e.Code != codes.InvalidArgument || e.Reason != apierror.ReasonValidationFailed || e.Field != field ||
			e.Limit != "1000000 cost units per evaluation" || !strings.Contains(e.Message, `rule "deny/costly" costs at least`) {
			t.Errorf("%s: %v; want VALIDATION_FAILED on %s naming the rule, its estimated cost and the limit", what, err, field)
		}
	}

	_, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
		Properties: append([]*lehrpb.Property{costly}, ordinary...)})
	wantRefused("publish", err, "properties[0].value")
	if _, err := cl.GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: "shop/fw"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetNamespace after the refused publish: %v; want NOT_FOUND", err)
	}
	v, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "shop/fw", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY, Properties: ordinary})
	if err != nil {
		t.Fatalf("publishing ordinary rules: %v", err)
	}
	_, err = cl.Patch(ctx, &lehrpb.PatchRequest{Namespace: "shop/fw", BaseVersion: v.GetVersion().GetSeq(), Set: []*lehrpb.Property{costly}})
	wantRefused("patch", err, "set[0].value")
	_, err = cl.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{Parent: "domains/shop/policies/fw", PolicyExperimentId: "costly",
		PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: "domains/shop/policies/fw", Rules: []*lehrpb.Property{costly}}}})
	wantRefused("experiment", err, "policy_experiment.policy.rules[0].value")
}
