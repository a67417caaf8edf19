package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/peercred"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Who is a fleet admin, and who may create a zone (fleet.go), caller by
// caller.
func TestMayCreateZone(t *testing.T) {
	tlsPeer := func(id *url.URL) credentials.AuthInfo {
		leaf := &x509.Certificate{}
		if id != nil {
			leaf.URIs = []*url.URL{id}
		}
		return credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}}
	}
	user := func(name string) credentials.AuthInfo {
		return tlsPeer(tlsconfig.Identity{Role: tlsconfig.RoleUser, Name: name}.URI())
	}
	other := uint32(os.Getuid() + 4242)
	for _, tc := range []struct {
		name   string
		auth   credentials.AuthInfo // nil: in-process
		admins []string
		local  map[string]string // Options.LocalUsers
		dev    bool
		ok     bool // may create zone-a
		// byZone: ok as zone-a's distributor only, not as a fleet admin.
		byZone bool
	}{
		{name: "in-process", ok: true},
		{name: "a user", auth: user("eve")},
		{name: "a user in dev mode", auth: user("eve"), dev: true},
		{name: "a fleet admin", auth: user("ops"), admins: []string{"ops"}, ok: true},
		{name: "a user who is not one", auth: user("eve"), admins: []string{"ops"}},
		{name: "control's own user on the socket", auth: peercred.Info{UID: uint32(os.Getuid()), User: "lehr"}, ok: true},
		{name: "root on the socket", auth: peercred.Info{UID: 0, User: "root"}, ok: true},
		{name: "another local user", auth: peercred.Info{UID: other, User: "mallory"}},
		{name: "a local fleet admin", auth: peercred.Info{UID: other, User: "ops"}, admins: []string{"unix:ops"}, ok: true},
		// Local accounts and certificate users are distinct identities
		// unless LocalUsers maps one to the other (issue 28, item 6).
		{name: "a local account named like a fleet admin", auth: peercred.Info{UID: other, User: "ops"}, admins: []string{"ops"}},
		{name: "a user named like a local fleet admin", auth: user("ops"), admins: []string{"unix:ops"}},
		{name: "a local account mapped to a fleet admin", auth: peercred.Info{UID: other, User: "alice"}, admins: []string{"ops"}, local: map[string]string{"alice": "ops"}, ok: true},
		{name: "a local account mapped to another user", auth: peercred.Info{UID: other, User: "ops"}, admins: []string{"ops", "unix:ops"}, local: map[string]string{"ops": "eve"}},
		{name: "the zone's distributor", auth: tlsPeer(tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "d1"}.URI()), ok: true, byZone: true},
		{name: "another zone's distributor", auth: tlsPeer(tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-b", Name: "d1"}.URI())},
		{name: "a host", auth: tlsPeer(tlsconfig.Identity{Role: tlsconfig.RoleHost, Zone: "zone-a", Name: "h1"}.URI())},
		{name: "a control replica", auth: tlsPeer(tlsconfig.Identity{Role: tlsconfig.RoleControl, Name: "c2"}.URI()), ok: true},
		{name: "a certificate without identity", auth: tlsPeer(nil)},
		{name: "TLS without a client certificate", auth: credentials.TLSInfo{}},
		{name: "TLS without a client certificate, dev mode", auth: credentials.TLSInfo{}, dev: true, ok: true},
		{name: "plaintext", auth: fakeAuth{}},
		{name: "plaintext, dev mode", auth: fakeAuth{}, dev: true, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{fleetAdmins: tc.admins, localUsers: tc.local, devMode: tc.dev}
			ctx := context.Background()
			if tc.auth != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: tc.auth})
			}
			if got, want := s.fleetAdmin(ctx), tc.ok && !tc.byZone; got != want {
				t.Errorf("fleetAdmin = %v, want %v", got, want)
			}
			err := s.mayCreateZone(ctx, "zone-a")
			if tc.ok {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if e := apierror.FromError(err); e == nil || e.Code != codes.PermissionDenied {
				t.Errorf("err %v; want PERMISSION_DENIED", err)
			}
		})
	}
}

type fakeAuth struct{}

func (fakeAuth) AuthType() string { return "insecure" }
