package validate

import (
	"fmt"
	"mime"
	"strings"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/jsonyaml"
)

// parseContentType checks a content type's syntax and length and returns its
// format. The empty content type is opaque.
func parseContentType(key, ct string) (jsonyaml.Format, *Violation) {
	if ct == "" {
		return jsonyaml.Opaque, nil
	}
	bad := func(limit, format string, args ...any) *Violation {
		return &Violation{
			Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent,
			Key: key, Field: "content_type", Message: fmt.Sprintf(format, args...), Limit: limit,
		}
	}
	if len(ct) > MaxContentType {
		return 0, bad(fmt.Sprintf("%d bytes", MaxContentType),
			"content type of %q is %d bytes; a content type may be at most %d bytes", key, len(ct), MaxContentType)
	}
	mediaType, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, bad("", "content type %q of %q is not a valid media type (%v); want type/subtype with optional parameters, e.g. \"application/json\" or \"text/plain; charset=utf-8\"",
			ct, key, err)
	}
	if !strings.Contains(mediaType, "/") {
		return 0, bad("", "content type %q of %q has no subtype; want type/subtype, e.g. \"application/json\" or \"text/plain\"", ct, key)
	}
	f := jsonyaml.FormatOf(mediaType)
	if cs, ok := params["charset"]; ok && f != jsonyaml.Opaque {
		if cs := strings.ToLower(cs); cs != "utf-8" && cs != "us-ascii" {
			return 0, bad("", "content type %q of %q has charset %q; Lehr stores text as UTF-8: omit charset or use charset=utf-8", ct, key, params["charset"])
		}
	}
	return f, nil
}

// checkContent checks that p's value parses as its content type.
func checkContent(p content.Property) *Violation {
	f, v := parseContentType(p.Key, p.ContentType)
	if v != nil || f == jsonyaml.Opaque {
		return v
	}
	if _, err := jsonyaml.ToJSON(f, p.Value); err != nil {
		return &Violation{
			Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent,
			Key: p.Key, Field: "value",
			Message: fmt.Sprintf("value of %q does not match content type %q: %v", p.Key, p.ContentType, err),
		}
	}
	return nil
}
