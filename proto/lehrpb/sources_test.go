package lehrpb_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/testing/protocmp"

	// The Go packages of the vendored Google API protos, so that every
	// vendored file is registered (lehrpb alone links only the ones it
	// imports).
	_ "cloud.google.com/go/longrunning/autogen/longrunningpb"
	_ "google.golang.org/genproto/googleapis/api/annotations"
	_ "google.golang.org/genproto/googleapis/rpc/status"

	_ "lehr.dev/lehr/proto/lehrpb"
)

// TestSourcesMatchGo compiles every .proto file under proto/ — Lehr's own
// (proto/lehr) and the vendored Google API ones (proto/google) — and checks
// that each describes exactly what the Go package linked for it registers:
// the generated lehrpb was regenerated after the last edit of a .proto
// file, and the vendored googleapis files are the versions of the Go
// packages go.mod pins (google.golang.org/genproto/googleapis/...,
// cloud.google.com/go/longrunning), so `make proto`, grpcurl with
// -import-path proto and server reflection all see one schema. A failure
// after a go.mod upgrade of those packages means: vendor the matching
// files (proto/google/README.md).
func TestSourcesMatchGo(t *testing.T) {
	const root = ".." // proto/
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".proto") {
			return err
		}
		rel, err := filepath.Rel(root, p)
		paths = append(paths, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var google, lehr int
	for _, p := range paths {
		switch {
		case strings.HasPrefix(p, "google/"):
			google++
		case strings.HasPrefix(p, "lehr/"):
			lehr++
		}
	}
	// Guard against a walk that finds nothing to check.
	if google < 8 || lehr < 7 {
		t.Fatalf("found %d Google and %d Lehr .proto files under proto/ (%v); want at least 8 and 7", google, lehr, paths)
	}

	c := protocompile.Compiler{
		// google/protobuf/*.proto are not vendored: they come with protoc
		// (for make proto) and here from the Go runtime.
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{root}}),
	}
	files, err := c.Compile(context.Background(), paths...)
	if err != nil {
		t.Fatalf("compile proto/: %v", err)
	}
	for _, f := range files {
		reg, err := protoregistry.GlobalFiles.FindFileByPath(f.Path())
		if err != nil {
			t.Errorf("%s: no Go package linked into this test registers it: %v", f.Path(), err)
			continue
		}
		got := protodesc.ToFileDescriptorProto(f)
		want := protodesc.ToFileDescriptorProto(reg)
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			hint := "run 'make proto'"
			if strings.HasPrefix(f.Path(), "google/") {
				hint = "vendor the version matching go.mod (proto/google/README.md)"
			}
			t.Errorf("proto/%s differs from the descriptor its Go package registers (-Go +source); %s:\n%s", f.Path(), hint, diff)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "google", "LICENSE")); err != nil {
		t.Errorf("the vendored Google API protos need their licence: %v", err)
	}
}
