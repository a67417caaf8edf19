package control_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// wantRefusal fails the test unless err is an API error of code and
// reason whose message says every one of says.
func wantRefusal(t *testing.T, what string, err error, code codes.Code, reason string, says ...string) {
	t.Helper()
	e := apierror.FromError(err)
	if e == nil || e.Code != code || e.Reason != reason {
		t.Fatalf("%s: %v; want %v/%s", what, err, code, reason)
	}
	for _, s := range says {
		if !strings.Contains(e.Message, s) {
			t.Errorf("%s: %q does not say %q", what, e.Message, s)
		}
	}
}

// auditOf returns the audit records of method, oldest first.
func auditOf(t *testing.T, cl lehrpb.ControlClient, method string) []*lehrpb.AuditRecord {
	t.Helper()
	resp, err := cl.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []*lehrpb.AuditRecord
	for _, r := range resp.GetRecords() {
		if r.GetMethod() == method {
			out = append(out, r)
		}
	}
	return out
}

// DeleteNamespace end to end: a stale etag and a namespace in use are
// refused and change nothing; forced, the namespace, its history and its
// goals go, its domain's usage is credited back, the deletion is audited
// with what it removed, and a namespace published again under the name
// continues at the next version.
func TestDeleteNamespace(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "pay", nil)
	if _, err := cl.CreateZone(testCtx(t), &lehrpb.CreateZoneRequest{Name: "zone-a"}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "2", "3"} {
		publish(t, cl, "pay/limits", prop("rps", "", v))
	}
	publish(t, cl, "pay/other", prop("k", "", "v"))
	ns, err := cl.GetNamespace(testCtx(t), &lehrpb.GetNamespaceRequest{Name: "pay/limits"})
	if err != nil {
		t.Fatal(err)
	}
	if ns.GetEtag() != "v3" {
		t.Errorf("etag of a namespace at version 3: %q, want v3", ns.GetEtag())
	}
	before, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "pay"})
	if err != nil {
		t.Fatal(err)
	}

	_, err = cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/limits", Etag: "v2"})
	wantRefusal(t, "a stale etag", err, codes.Aborted, apierror.ReasonEtagMismatch, `"v3"`, "--etag v3", "nothing was deleted")
	if _, err := cl.ReportZoneStatus(testCtx(t), &lehrpb.ReportZoneStatusRequest{Zone: "zone-a", DistributorId: "d1", Agents: 2,
		Versions: []*lehrpb.VersionCount{{Namespace: "pay/limits", Version: 3, Agents: 2}}}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/limits", Etag: "v3"})
	wantRefusal(t, "a namespace in use", err, codes.FailedPrecondition, apierror.ReasonNamespaceInUse,
		"zone zone-a: 2 hosts", "lehr zones status zone-a", "NOT_FOUND", "lehr delete pay/limits --force")
	if h, err := cl.History(testCtx(t), &lehrpb.HistoryRequest{Namespace: "pay/limits"}); err != nil || len(h.GetVersions()) != 3 {
		t.Fatalf("history after the refusals: %v, %v; want all 3 versions", h.GetVersions(), err)
	}
	_, err = cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/limits--preview", Force: true})
	wantRefusal(t, "a preview namespace", err, codes.InvalidArgument, apierror.ReasonInvalidName, "deleted with the policy")

	if _, err := cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/limits", Etag: "v3", Force: true, Message: "retired"}); err != nil {
		t.Fatalf("forced deletion: %v", err)
	}
	for what, call := range map[string]func() error{
		"GetNamespace": func() error {
			_, err := cl.GetNamespace(testCtx(t), &lehrpb.GetNamespaceRequest{Name: "pay/limits"})
			return err
		},
		"History": func() error {
			_, err := cl.History(testCtx(t), &lehrpb.HistoryRequest{Namespace: "pay/limits"})
			return err
		},
		"Get": func() error {
			_, err := cl.Get(testCtx(t), &lehrpb.GetRequest{Namespace: "pay/limits", Version: 2})
			return err
		},
		"DeleteNamespace again": func() error {
			_, err := cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/limits"})
			return err
		},
	} {
		if e := apierror.FromError(call()); e == nil || e.Code != codes.NotFound {
			t.Errorf("%s of the deleted namespace: %v, want NOT_FOUND", what, e)
		}
	}
	list, err := cl.ListNamespaces(testCtx(t), &lehrpb.ListNamespacesRequest{Domain: "pay"})
	if err != nil || len(list.GetNamespaces()) != 1 || list.GetNamespaces()[0].GetName() != "pay/other" {
		t.Errorf("namespaces after the deletion: %v, %v; want pay/other", list.GetNamespaces(), err)
	}
	goals, err := cl.GetGoals(testCtx(t), &lehrpb.GetGoalsRequest{Zone: "zone-a"})
	if err != nil || len(goals.GetGoals()) != 1 || goals.GetGoals()[0].GetNamespace() != "pay/other" {
		t.Errorf("zone-a's goals after the deletion: %v, %v; want pay/other's only", goals.GetGoals(), err)
	}
	after, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := after.GetUsage().GetStoredBytes(), before.GetUsage().GetStoredBytes()-ns.GetStoredBytes(); got != want || after.GetUsage().GetNamespaces() != 1 {
		t.Errorf("domain usage after the deletion: %d bytes in %d namespaces; want %d in 1", got, after.GetUsage().GetNamespaces(), want)
	}

	recs := auditOf(t, cl, "DeleteNamespace")
	var codesSeen []string
	var ok *lehrpb.AuditRecord
	for _, r := range recs {
		codesSeen = append(codesSeen, r.GetCode())
		if r.GetCode() == "OK" {
			ok = r
		}
	}
	for _, c := range []string{"ABORTED", "FAILED_PRECONDITION", "OK", "NOT_FOUND"} {
		if !slices.Contains(codesSeen, c) {
			t.Errorf("audit records of DeleteNamespace: %v; want one %s", codesSeen, c)
		}
	}
	if ok.GetTarget() != "pay/limits" || ok.GetDomain() != "pay" || ok.GetMessage() != "retired" ||
		!strings.Contains(ok.GetDetail(), "force=true") || !strings.Contains(ok.GetDetail(), "1 namespace(s), 3 version(s)") ||
		!strings.Contains(ok.GetDetail(), "starts at version 4") {
		t.Errorf("audit record of the deletion: %v", ok)
	}

	v := publish(t, cl, "pay/limits", prop("rps", "", "new"))
	if v.GetSeq() != 4 || v.GetParent() != 0 {
		t.Errorf("a publish to the deleted name: version %d (parent %d); want 4, with no parent", v.GetSeq(), v.GetParent())
	}
}

// DeleteDomain refuses a domain with namespaces unless forced, and a stale
// etag; forced, the domain and its namespaces go, and one created again
// under the name starts afresh but for its namespaces' version numbers.
func TestDeleteDomain(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client
	createDomain(t, cl, "shop", nil)
	publish(t, cl, "shop/a", prop("k", "", "1"))
	publish(t, cl, "shop/a", prop("k", "", "2"))
	publish(t, cl, "shop/b", prop("k", "", "1"))
	d, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "shop"})
	if err != nil || d.GetEtag() == "" {
		t.Fatalf("GetDomain: %v, %v; want an etag", d, err)
	}
	_, err = cl.DeleteDomain(testCtx(t), &lehrpb.DeleteDomainRequest{Name: "shop"})
	wantRefusal(t, "a domain with namespaces", err, codes.FailedPrecondition, apierror.ReasonDomainNotEmpty,
		"2 namespaces (shop/a, shop/b)", "'lehr delete shop/a', 'lehr delete shop/b'", "lehr domain delete shop --force")
	upd, err := cl.UpdateDomain(testCtx(t), &lehrpb.UpdateDomainRequest{Domain: &lehrpb.Domain{Name: "shop", Description: "changed"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}})
	if err != nil || upd.GetEtag() == d.GetEtag() {
		t.Fatalf("UpdateDomain: etag %q (was %q), %v; want a new etag", upd.GetEtag(), d.GetEtag(), err)
	}
	_, err = cl.DeleteDomain(testCtx(t), &lehrpb.DeleteDomainRequest{Name: "shop", Etag: d.GetEtag(), Force: true})
	wantRefusal(t, "a stale domain etag", err, codes.Aborted, apierror.ReasonEtagMismatch, upd.GetEtag())
	if _, err := cl.DeleteDomain(testCtx(t), &lehrpb.DeleteDomainRequest{Name: "shop", Etag: upd.GetEtag(), Force: true}); err != nil {
		t.Fatalf("forced deletion: %v", err)
	}
	if _, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "shop"}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("GetDomain after the deletion: %v, want NOT_FOUND", err)
	}
	st, err := cl.GetStoreStatus(testCtx(t), &lehrpb.GetStoreStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range st.GetDomains() {
		if ds.GetDomain() == "shop" {
			t.Errorf("store status lists the deleted domain: %v", ds)
		}
	}
	if _, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "shop/a", Properties: []*lehrpb.Property{prop("k", "", "3")}}); apierror.FromError(err) == nil || apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("publish to a namespace of the deleted domain: %v, want NOT_FOUND", err)
	}
	if rec := auditOf(t, cl, "DeleteDomain"); len(rec) != 3 || rec[2].GetCode() != "OK" || !strings.Contains(rec[2].GetDetail(), "2 namespace(s), 3 version(s)") {
		t.Errorf("audit records of DeleteDomain: %v", rec)
	}
	createDomain(t, cl, "shop", nil)
	if v := publish(t, cl, "shop/b", prop("k", "", "again")); v.GetSeq() != 3 {
		t.Errorf("a namespace of the domain created again starts at %d, want 3 (after shop/a's 2)", v.GetSeq())
	}
}

// Deleting needs the domain's admins: a publisher and a stranger are
// refused naming acl.admins; the admin deletes a namespace; a fleet admin
// (control's own user on its socket) deletes any domain.
func TestDeleteACL(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	sock := filepath.Join(t.TempDir(), "control.sock")
	c := startSecure(t, control.Options{TLS: serverTLS, Socket: sock})
	dial := func(name string) lehrpb.ControlClient {
		return lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, userCert(t, ca, caKey, name))))
	}
	alice, pat, eve := dial("alice"), dial("pat"), dial("eve")
	if _, err := alice.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay", Acl: &lehrpb.Acl{Publishers: []string{"pat"}}}}); err != nil {
		t.Fatal(err)
	}
	publishIdentified(t, alice, "pay/a", prop("k", "", "1"))
	publishIdentified(t, pat, "pay/b", prop("k", "", "1"))
	for who, cl := range map[string]lehrpb.ControlClient{"pat": pat, "eve": eve} {
		_, err := cl.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/a", Force: true})
		wantRefusal(t, who+" deleting a namespace", err, codes.PermissionDenied, apierror.ReasonPermissionDenied, `user "`+who+`"`, "acl.admins", "alice")
		_, err = cl.DeleteDomain(testCtx(t), &lehrpb.DeleteDomainRequest{Name: "pay", Force: true})
		wantRefusal(t, who+" deleting the domain", err, codes.PermissionDenied, apierror.ReasonPermissionDenied, `user "`+who+`"`, "acl.admins")
	}
	if _, err := alice.DeleteNamespace(testCtx(t), &lehrpb.DeleteNamespaceRequest{Name: "pay/a"}); err != nil {
		t.Fatalf("the admin deleting a namespace: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fleet := lehrpb.NewControlClient(conn)
	if _, err := fleet.DeleteDomain(testCtx(t), &lehrpb.DeleteDomainRequest{Name: "pay", Force: true}); err != nil {
		t.Fatalf("a fleet admin deleting the domain: %v", err)
	}
	if recs := auditOf(t, fleet, "DeleteDomain"); len(recs) != 3 || recs[2].GetCode() != "OK" || !strings.HasPrefix(recs[2].GetAuthor(), "unix:") {
		t.Errorf("audit records of DeleteDomain: %v; want two refusals and the fleet admin's deletion", recs)
	}
}
