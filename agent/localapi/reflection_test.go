package localapi

import (
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"lehr.dev/lehr/internal/reflecttest"
)

// The socket describes itself over gRPC server reflection (v1 and
// v1alpha), so any gRPC tool can call it without the .proto files: the
// Agent service and both reflection services are listed, and the files
// arrive with everything they import and equal what the agent runs.
func TestServerReflection(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	startServer(t, sock)
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	want := []string{"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection", "lehr.v1.Agent"}
	for _, method := range []string{reflecttest.V1, reflecttest.V1Alpha} {
		s, err := reflecttest.Fetch(ctx(t), cc, method)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if !slices.Equal(s.Services, want) {
			t.Errorf("%s: services %v, want %v", method, s.Services, want)
		}
		// PreviewCounts is defined in preview.proto, which agent.proto imports.
		for _, name := range []protoreflect.FullName{"lehr.v1.Agent", "lehr.v1.SubscribeRequest", "lehr.v1.PreviewCounts"} {
			if _, err := s.Files.FindDescriptorByName(name); err != nil {
				t.Errorf("%s: %s does not resolve in what reflection sent: %v", method, name, err)
			}
		}
		if d := s.Differences(protoregistry.GlobalFiles); len(d) > 0 {
			t.Errorf("%s: reflection describes files otherwise than the agent is built with:\n%v", method, d)
		}
	}
}
