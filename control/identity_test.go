package control_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/proto/lehrpb"
)

// One identity per caller (issue 28, item 1): a client certificate is who
// its Lehr identity URI SAN says — for the domain ACLs, the author of a
// version and of a domain, the audit log and control's signature alike —
// whatever its CommonName says, and an asserted author ("lehr --as": a
// request's author field, the lehr-author metadata) never stands in for
// it: it is refused, saying why. Two odd certificates of mallory's, both
// signed by the fleet's CA: one without a CommonName (normal for
// SPIFFE-style certificates), one whose CommonName is alice.
func TestOneIdentityFromTheURISAN(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	c := startSecure(t, control.Options{TLS: serverTLS})
	dial := func(cn, name string) lehrpb.ControlClient {
		cert := issueID(t, ca, caKey, cn, false, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI())
		return lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, cert)))
	}
	alice := dial("alice", "alice")
	if _, err := alice.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "pay"}}); err != nil {
		t.Fatal(err)
	}
	verifier := signing.NewVerifier(c.SigningPublicKey())

	for _, tc := range []struct {
		name   string
		client lehrpb.ControlClient
		domain string
	}{
		{"no CommonName", dial("", "mallory"), "mal-a"},
		{"CommonName alice", dial("alice", "mallory"), "mal-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := tc.client
			// Her own domain is hers, by her identity.
			d, err := cl.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: tc.domain}})
			if err != nil {
				t.Fatal(err)
			}
			if d.GetCreatedBy() != "mallory" || strings.Join(d.GetAcl().GetAdmins(), ",") != "mallory" {
				t.Errorf("domain created by %q, admins %v; want mallory, the certificate's identity", d.GetCreatedBy(), d.GetAcl().GetAdmins())
			}
			// Asserting alice is refused, by the request's author field
			// and by the metadata, and says why.
			for what, call := range map[string]func() error{
				"author field": func() error {
					_, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: tc.domain + "/x", Author: "alice", Properties: []*lehrpb.Property{prop("k", "", "as-alice")}})
					return err
				},
				"lehr-author metadata": func() error {
					_, err := cl.Publish(asAuthor(testCtx(t), "alice"), &lehrpb.PublishRequest{Namespace: tc.domain + "/x", Properties: []*lehrpb.Property{prop("k", "", "as-alice")}})
					return err
				},
				"metadata on a call without an author field": func() error {
					_, err := cl.CreateDomain(asAuthor(testCtx(t), "alice"), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: tc.domain + "-2"}})
					return err
				},
			} {
				e := apierror.FromError(call())
				if e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `you are "mallory"`) ||
					!strings.Contains(e.Message, "spiffe://lehr/user/mallory") || !strings.Contains(e.Message, "--as") || !strings.Contains(e.Message, "dev mode") {
					t.Errorf("asserting alice by the %s: %v; want PERMISSION_DENIED saying she is mallory and --as counts only in dev mode", what, e)
				}
			}
			// What she publishes is hers, and control signs that.
			resp, err := cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: tc.domain + "/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
			if err != nil {
				t.Fatal(err)
			}
			if v := resp.GetVersion(); v.GetAuthor() != "mallory" || strings.Contains(v.GetTransportIdentity(), "alice") {
				t.Errorf("version by %q via %q; want mallory, and no CommonName", v.GetAuthor(), v.GetTransportIdentity())
			}
			h := history(t, cl, tc.domain+"/x", 0)
			if len(h) != 1 {
				t.Fatalf("history of %s/x: %d versions, want 1 (the refused publishes changed nothing)", tc.domain, len(h))
			}
			if _, err := verifier.Verify(h[0], lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG); err != nil || h[0].GetAuthor() != "mallory" {
				t.Errorf("version by %q: signature %v; want mallory's, signed", h[0].GetAuthor(), err)
			}
			// The ACL checks her as mallory.
			_, err = cl.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "pay/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
			if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, `user "mallory"`) {
				t.Errorf("publishing to alice's domain: %v; want PERMISSION_DENIED for user mallory", err)
			}
			// And the audit log names her, never alice.
			for _, dom := range []string{tc.domain, "pay"} {
				recs, err := alice.ListAuditRecords(testCtx(t), &lehrpb.ListAuditRecordsRequest{Domain: dom})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs.GetRecords() {
					byAlice := dom == "pay" && r.GetCode() == "OK" // alice's own CreateDomain
					if want := map[bool]string{true: "alice", false: "mallory"}[byAlice]; r.GetAuthor() != want ||
						!byAlice && strings.Contains(r.GetTransportIdentity(), "alice") {
						t.Errorf("audit record %s %s %s: by %q via %q; want %s", r.GetMethod(), r.GetTarget(), r.GetCode(), r.GetAuthor(), r.GetTransportIdentity(), want)
					}
				}
			}
		})
	}
}

// TestReservedNamesAreNoCallers: the authors control records for itself —
// the rollout strategist's "lehr-rollout", which it also trusts to
// recognise a rollback of its own, "control" and "anonymous" — are no
// caller's. A certificate made out to one may call nothing; no ACL, fleet
// admin list or local account mapping names one; and no caller asserts
// one, in dev mode either.
func TestReservedNamesAreNoCallers(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	c := startSecure(t, control.Options{TLS: serverTLS})
	for _, name := range service.Reserved {
		cert := issueID(t, ca, caKey, "", false, tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI())
		cl := lehrpb.NewControlClient(controltest.Dial(t, c.Addr().String(), mtlsDial(pool, cert)))
		_, err := cl.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "forged"}})
		if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied || !strings.Contains(e.Message, "reserved") {
			t.Errorf("a certificate for user %q creating a domain: %v; want PERMISSION_DENIED saying the name is reserved", name, err)
		}
		if err := service.CheckPrincipal(name); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("CheckPrincipal(%q) = %v; want it reserved", name, err)
		}
		if _, err := control.New(control.Options{LocalUsers: map[string]string{"bob": name}}); !errors.Is(err, control.ErrIdentityOptions) {
			t.Errorf("New with local account bob mapped to %q: %v; want ErrIdentityOptions", name, err)
		}
	}

	dev := controltest.StartControl(t, control.Options{}).Client // dev mode, unidentified callers
	if _, err := dev.CreateDomain(testCtx(t), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range service.Reserved {
		_, err := dev.Publish(testCtx(t), &lehrpb.PublishRequest{Namespace: "dev/x", Author: name, Properties: []*lehrpb.Property{prop("k", "", "v")}})
		if e := apierror.FromError(err); e == nil || e.Code != codes.InvalidArgument || e.Field != "author" || !strings.Contains(e.Message, "reserved") {
			t.Errorf("dev mode, publish as %q: %v; want INVALID_ARGUMENT on author, reserved", name, err)
		}
		_, err = dev.Publish(asAuthor(testCtx(t), name), &lehrpb.PublishRequest{Namespace: "dev/x", Properties: []*lehrpb.Property{prop("k", "", "v")}})
		if e := apierror.FromError(err); e == nil || e.Code != codes.InvalidArgument || e.Field != service.AuthorMetadataKey {
			t.Errorf("dev mode, publish with %s %q: %v; want INVALID_ARGUMENT on the metadata", service.AuthorMetadataKey, name, err)
		}
	}
}

// The name forms of identities: ACLs and fleet admins name certificate
// users by name and local accounts as unix:<account>; anything else is
// refused.
func TestCheckPrincipal(t *testing.T) {
	for _, ok := range []string{"alice", "ci-bot@example.com", "unix:alice", "unix:uid-4242"} {
		if err := service.CheckPrincipal(ok); err != nil {
			t.Errorf("CheckPrincipal(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "unix:", "unix:a b", "alice bob", "spiffe://lehr/user/alice", "user:alice"} {
		if err := service.CheckPrincipal(bad); err == nil {
			t.Errorf("CheckPrincipal(%q) = nil, want an error", bad)
		}
	}
}
