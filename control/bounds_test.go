package control_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
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

	resp, err := cl.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The domain, then every call above and the repeated key.
	if got, want := len(resp.GetRecords()), 1+len(calls)+1; got != want {
		t.Errorf("%d audit records; want %d", got, want)
	}
	const maxRecord = 8 << 10
	for _, r := range resp.GetRecords() {
		if n := proto.Size(r); n > maxRecord {
			t.Errorf("audit record of %s %.60s… is %d bytes; want at most %d", r.GetMethod(), r.GetTarget(), n, maxRecord)
		}
	}
	var refused int
	for _, r := range resp.GetRecords() {
		if r.GetCode() != "OK" {
			refused++
		}
	}
	if refused != len(calls)+1 {
		t.Errorf("%d refusals recorded; want %d", refused, len(calls)+1)
	}
}
