package control_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/reflecttest"
	"lehr.dev/lehr/internal/tlsconfig"
)

// Any gRPC tool can read control's schema from control itself (server
// reflection, v1 and v1alpha) on both its listeners: every service it
// serves is listed, and the files defining them arrive with everything
// they import (google.longrunning, google.api, google.rpc) and describe
// exactly what control runs. Reflection is authenticated as every other
// call is: under mutual TLS a user may describe the API, a distributor
// certificate (which may call only the distribution methods) may not,
// and a client without a certificate does not get past the handshake; on
// the unix socket the local account may.
func TestServerReflection(t *testing.T) {
	ca, caKey, serverTLS, pool := mtlsSetup(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "control.sock")
	c, err := control.New(control.Options{DataDir: dir, Listen: "127.0.0.1:0", MetricsListen: "off", Socket: sock, NoSync: true,
		TLS: serverTLS, Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	t.Cleanup(func() { c.Close(); <-done })
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("control stopped: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("control not ready")
	}
	dial := func(target string, opt grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient(target, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	addr := c.Addr().String()
	user := dial(addr, mtlsDial(pool, userCert(t, ca, caKey, "alice")))
	local := dial("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))

	wantServices := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection", "lehr.v1.Control"}
	for _, tc := range []struct {
		name   string
		conn   *grpc.ClientConn
		method string
	}{
		{"mTLS user, v1", user, reflecttest.V1},
		{"mTLS user, v1alpha", user, reflecttest.V1Alpha},
		{"unix socket, v1", local, reflecttest.V1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := reflecttest.Fetch(testCtx(t), tc.conn, tc.method)
			if err != nil {
				t.Fatalf("reflection: %v", err)
			}
			if !slices.Equal(s.Services, wantServices) {
				t.Errorf("services %v, want %v", s.Services, wantServices)
			}
			for _, name := range []protoreflect.FullName{"lehr.v1.Control", "lehr.v1.PublishRequest",
				"google.longrunning.Operation", "google.rpc.Status", "google.api.http"} {
				if _, err := s.Files.FindDescriptorByName(name); err != nil {
					t.Errorf("%s does not resolve in what reflection sent: %v", name, err)
				}
			}
			if d := s.Differences(protoregistry.GlobalFiles); len(d) > 0 {
				t.Errorf("reflection describes files otherwise than control is built with:\n%v", d)
			}
		})
	}

	dist := dial(addr, mtlsDial(pool, issueID(t, ca, caKey, "d1", false,
		tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: "zone-a", Name: "d1"}.URI())))
	if _, err := reflecttest.Fetch(testCtx(t), dist, reflecttest.V1); status.Code(err) != codes.PermissionDenied {
		t.Errorf("reflection with a distributor certificate: %v; want PERMISSION_DENIED", err)
	}
	anon := dial(addr, mtlsDial(pool))
	if _, err := reflecttest.Fetch(testCtx(t), anon, reflecttest.V1); err == nil {
		t.Errorf("reflection without a client certificate was served; want the handshake refused")
	}
}
