package control_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/service"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// asAuthor returns a context asserting author in gRPC metadata.
func asAuthor(ctx context.Context, author ...string) context.Context {
	for _, a := range author {
		ctx = metadata.AppendToOutgoingContext(ctx, service.AuthorMetadataKey, a)
	}
	return ctx
}

// TestAuthorFromMetadata checks who domains and versions are attributed to
// without mutual TLS: the request's author field, else the lehr-author
// metadata, else "anonymous"; and that bad metadata is refused.
func TestAuthorFromMetadata(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	cl := srv.Client

	createdBy := func(name string) string {
		t.Helper()
		d, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: name})
		if err != nil {
			t.Fatalf("GetDomain(%s): %v", name, err)
		}
		return d.GetCreatedBy()
	}
	if _, err := cl.CreateDomain(asAuthor(testCtx(t), "carol"), &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "withmd"}}); err != nil {
		t.Fatalf("CreateDomain with metadata: %v", err)
	}
	if got := createdBy("withmd"); got != "carol" {
		t.Errorf("created_by with lehr-author metadata = %q, want carol", got)
	}
	createDomain(t, cl, "nomd", nil)
	if got := createdBy("nomd"); got != "anonymous" {
		t.Errorf("created_by without metadata = %q, want anonymous", got)
	}

	pub := func(ctx context.Context, author string) string {
		t.Helper()
		resp, err := cl.Publish(ctx, &lehrpb.PublishRequest{Namespace: "withmd/app", Author: author, Properties: []*lehrpb.Property{prop("k", "", author)}})
		if err != nil {
			t.Fatalf("Publish(author %q): %v", author, err)
		}
		return resp.GetVersion().GetAuthor()
	}
	if got := pub(asAuthor(testCtx(t), "carol"), ""); got != "carol" {
		t.Errorf("publish author from metadata = %q, want carol", got)
	}
	if got := pub(asAuthor(testCtx(t), "carol"), "dave"); got != "dave" {
		t.Errorf("publish author with both the field and metadata = %q, want dave (the field)", got)
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"too long", asAuthor(testCtx(t), strings.Repeat("a", 257))},
		{"twice", asAuthor(testCtx(t), "carol", "mallory")},
	} {
		_, err := cl.CreateDomain(tc.ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "rejected"}})
		if e := apierror.FromError(err); e.Code != codes.InvalidArgument || e.Field != service.AuthorMetadataKey || e.Message == "" {
			t.Errorf("CreateDomain with %s lehr-author = %v; want INVALID_ARGUMENT on %s", tc.name, err, service.AuthorMetadataKey)
		}
		_, err = cl.Publish(tc.ctx, &lehrpb.PublishRequest{Namespace: "withmd/app", Properties: []*lehrpb.Property{prop("k", "", "rejected")}})
		if e := apierror.FromError(err); e.Code != codes.InvalidArgument || e.Field != service.AuthorMetadataKey {
			t.Errorf("Publish with %s lehr-author = %v; want INVALID_ARGUMENT on %s", tc.name, err, service.AuthorMetadataKey)
		}
	}
	if _, err := cl.GetDomain(testCtx(t), &lehrpb.GetDomainRequest{Name: "rejected"}); apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("domain created despite bad metadata (GetDomain: %v)", err)
	}
	if h := history(t, cl, "withmd/app", 0); len(h) != 2 {
		t.Errorf("%d versions after rejected publishes, want 2", len(h))
	}
}
