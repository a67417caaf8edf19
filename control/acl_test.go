package control_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// Domain ACLs, every role × action, against the real gRPC server and
// etcd: admins may do everything, publishers publish, operators operate,
// everyone else is refused with PERMISSION_DENIED naming the user, the
// call and the ACL list that would allow it; reads stay open; a domain
// created over mutual TLS is administered by its creator, and one without
// admins is open to every user.
func TestDomainACL(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS}, mtlsDial(pool, userCert(t, ca, caKey, "alice")))
	dial := func(name string) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, userCert(t, ca, caKey, name))))
	}
	alice := srv.Client
	d, err := alice.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay",
		Acl: &lehrpb.Acl{Publishers: []string{"pat"}, Operators: []string{"oscar"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetAcl().GetAdmins(); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("admins of a domain alice created: %v; want [alice]", got)
	}
	publish(t, alice, "pay/limits", prop("k", "", "v"))
	created := 0

	actions := []struct {
		name string
		list string // the ACL list a refusal names ("" for admins)
		call func(cl lehrpb.ControlClient) error
	}{
		{"publish", "acl.publishers", func(cl lehrpb.ControlClient) error {
			_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/limits", Properties: []*lehrpb.Property{prop("k", "", "v2")}})
			return err
		}},
		{"patch", "acl.publishers", func(cl lehrpb.ControlClient) error {
			_, err := cl.Patch(testCtx(t), &lehrpb.PatchRequest{Namespace: "pay/limits", Set: []*lehrpb.Property{prop("p", "", "1")}})
			return err
		}},
		{"rollback", "acl.publishers", func(cl lehrpb.ControlClient) error {
			_, err := cl.Rollback(testCtx(t), &lehrpb.RollbackRequest{Namespace: "pay/limits", ToVersion: 1})
			return err
		}},
		{"create namespace", "acl.publishers", func(cl lehrpb.ControlClient) error {
			_, err := cl.CreateNamespace(testCtx(t), &lehrpb.CreateNamespaceRequest{Namespace: &lehrpb.Namespace{Name: fmt.Sprintf("pay/new-%d", created)}})
			created++
			return err
		}},
		{"delete rollout policy", "acl.operators", func(cl lehrpb.ControlClient) error {
			_, err := cl.DeleteRolloutPolicy(testCtx(t), &lehrpb.DeleteRolloutPolicyRequest{Scope: "pay"})
			return err
		}},
		{"create experiment", "acl.operators", func(cl lehrpb.ControlClient) error {
			_, err := cl.CreatePolicyExperiment(testCtx(t), &lehrpb.CreatePolicyExperimentRequest{Parent: "domains/pay/policies/authz", PolicyExperimentId: "e1"})
			return err
		}},
		{"forget canary history", "acl.operators", func(cl lehrpb.ControlClient) error {
			_, err := cl.ForgetCanaryHistory(testCtx(t), &lehrpb.ForgetCanaryHistoryRequest{Namespace: "pay/limits", Check: "latency"})
			return err
		}},
		{"delete policy", "acl.publishers", func(cl lehrpb.ControlClient) error {
			_, err := cl.DeletePolicy(testCtx(t), &lehrpb.DeletePolicyRequest{Name: "domains/pay/policies/authz"})
			return err
		}},
		{"update domain", "", func(cl lehrpb.ControlClient) error {
			_, err := cl.UpdateDomain(testCtx(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Description: "limits"},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}})
			return err
		}},
		{"get domain", "-", func(cl lehrpb.ControlClient) error {
			_, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "pay"})
			return err
		}},
	}
	allowed := map[string][]string{
		"alice": {"publish", "patch", "rollback", "create namespace", "delete policy", "delete rollout policy", "create experiment", "forget canary history", "update domain", "get domain"},
		"pat":   {"publish", "patch", "rollback", "create namespace", "delete policy", "get domain"},
		"oscar": {"delete rollout policy", "create experiment", "forget canary history", "get domain"},
		"eve":   {"get domain"},
	}
	for _, who := range []string{"alice", "pat", "oscar", "eve"} {
		cl := alice
		if who != "alice" {
			cl = dial(who)
		}
		for _, a := range actions {
			t.Run(who+"/"+a.name, func(t *testing.T) {
				err := a.call(cl)
				e := apierror.FromError(err)
				if slices.Contains(allowed[who], a.name) {
					if e != nil && e.Code == codes.PermissionDenied {
						t.Errorf("refused: %v", err)
					}
					return
				}
				want := a.list
				if want == "" {
					want = "acl.admins"
				}
				if e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `user "`+who+`"`) ||
					!strings.Contains(e.Message, want) || !strings.Contains(e.Message, "alice") {
					t.Errorf("err %v; want PERMISSION_DENIED naming %s, the call and %s with the admins", err, who, want)
				}
			})
		}
	}

	// Refusals change nothing: the namespace is at what alice, pat and the
	// rollbacks made of it, never at what eve or oscar tried.
	for _, h := range []string{"oscar", "eve"} {
		if _, err := dial(h).Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/limits", Properties: []*lehrpb.Property{prop("k", "", "by-"+h)}}); err == nil {
			t.Fatalf("%s published", h)
		}
	}
	got, err := alice.Get(testCtx(t), &lehrpb.GetRequest{Namespace: "pay/limits"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got.GetProperties() {
		if strings.HasPrefix(string(p.GetValue()), "by-") {
			t.Errorf("a refused publish landed: %v", p)
		}
	}

	// Admins change the ACL; an empty admins list opens the domain.
	eve := dial("eve")
	if _, err := alice.UpdateDomain(testCtx(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := eve.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/limits", Properties: []*lehrpb.Property{prop("k", "", "open")}}); err != nil {
		t.Errorf("publish to an open domain: %v", err)
	}
	// Bad ACLs and masks are refused, naming the field.
	for _, tc := range []struct {
		req  *lehrpb.UpdateDomainRequest
		want string
	}{
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}}, "update_mask"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}}, "update_mask.paths[0]"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Admins: []string{"a b"}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}, "domain.acl.admins[0]"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Publishers: []string{"x", "x"}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}, "domain.acl.publishers[1]"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "nope"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}, "domain.name"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Readers: []string{"zone-a", "Zone B"}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}, "domain.acl.readers[1]"},
		{&lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Readers: []string{"zone-a/bad host"}}}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"acl"}}}, "domain.acl.readers[0]"},
	} {
		_, err := eve.UpdateDomain(testCtx(t), tc.req)
		if e := apierror.FromError(err); e == nil || e.Field != tc.want {
			t.Errorf("UpdateDomain(%v): %v; want an error on %s", tc.req, err, tc.want)
		}
	}
	// A user's own domain is theirs.
	own, err := eve.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "eve-things"}})
	if err != nil || len(own.GetAcl().GetAdmins()) != 1 || own.GetAcl().GetAdmins()[0] != "eve" {
		t.Errorf("eve's domain: %v, %v; want eve its admin", own, err)
	}
	if _, err := dial("pat").Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "eve-things/x", Properties: []*lehrpb.Property{prop("k", "", "v")}}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.PermissionDenied {
		t.Errorf("pat publishing to eve's domain: %v; want PERMISSION_DENIED", err)
	}
}

// With fleet admins set, only they create zones, and a refusal names them
// (TestZonesNeedAFleetAdminByDefault: without, no user does).
func TestFleetAdminsCreateZones(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	srv := controltest.StartControl(t, control.Options{Listen: "127.0.0.1:0", TLS: serverTLS, FleetAdmins: []string{"ops"}},
		mtlsDial(pool, userCert(t, ca, caKey, "ops")))
	eve := lehrpb.NewControlClient(controltest.Dial(t, srv.Addr, mtlsDial(pool, userCert(t, ca, caKey, "eve"))))
	_, err := eve.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-x"})
	if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, "fleet admins (ops)") {
		t.Errorf("eve creating a zone: %v; want PERMISSION_DENIED naming the fleet admins", err)
	}
	if _, err := srv.Client.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-x"}); err != nil {
		t.Errorf("a fleet admin creating a zone: %v", err)
	}
}
