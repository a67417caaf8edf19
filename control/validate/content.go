package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"sigs.k8s.io/yaml"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
)

// format is how a value is interpreted according to its content type.
type format int

const (
	formatOpaque format = iota // no content type, or one Lehr does not inspect
	formatJSON
	formatYAML
	formatText
)

// Allowed forms, quoted in error messages.
const (
	jsonForms = `application/json and "+json" types`
	yamlForms = `application/yaml, application/x-yaml, text/yaml and "+yaml" types`
)

// formatOf classifies a media type already lowercased by mime.ParseMediaType.
func formatOf(mediaType string) format {
	switch {
	case mediaType == "application/json" || strings.HasSuffix(mediaType, "+json"):
		return formatJSON
	case mediaType == "application/yaml" || mediaType == "application/x-yaml" ||
		mediaType == "text/yaml" || strings.HasSuffix(mediaType, "+yaml"):
		return formatYAML
	case strings.HasPrefix(mediaType, "text/"):
		return formatText
	}
	return formatOpaque
}

// parseContentType checks a content type's syntax and length and returns its
// format. The empty content type is opaque.
func parseContentType(key, ct string) (format, *Violation) {
	if ct == "" {
		return formatOpaque, nil
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
	f := formatOf(mediaType)
	if cs, ok := params["charset"]; ok && f != formatOpaque {
		if cs := strings.ToLower(cs); cs != "utf-8" && cs != "us-ascii" {
			return 0, bad("", "content type %q of %q has charset %q; Lehr stores text as UTF-8: omit charset or use charset=utf-8", ct, key, params["charset"])
		}
	}
	return f, nil
}

// checkContent checks that p's value parses as its content type.
func checkContent(p content.Property) *Violation {
	f, v := parseContentType(p.Key, p.ContentType)
	if v != nil || f == formatOpaque {
		return v
	}
	if _, err := toJSON(f, p.Value); err != nil {
		return &Violation{
			Code: codes.InvalidArgument, Reason: apierror.ReasonInvalidContent,
			Key: p.Key, Field: "value",
			Message: fmt.Sprintf("value of %q does not match content type %q: %v", p.Key, p.ContentType, err),
		}
	}
	return nil
}

// toJSON checks a value of format f and, for JSON and YAML, returns it as
// JSON. Errors say where the value is wrong and which form is allowed.
func toJSON(f format, v []byte) ([]byte, error) {
	switch f {
	case formatJSON:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; %s must be UTF-8 JSON (RFC 8259)", invalidUTF8(v), jsonForms)
		}
		if err := jsonSyntax(v); err != nil {
			return nil, fmt.Errorf("%w; %s must hold exactly one JSON document (RFC 8259)", err, jsonForms)
		}
		return v, nil
	case formatYAML:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; %s must be UTF-8 YAML", invalidUTF8(v), yamlForms)
		}
		j, err := yaml.YAMLToJSONStrict(v)
		if err != nil {
			return nil, fmt.Errorf("invalid YAML: %s; %s must hold one YAML document with string keys and no duplicate keys", oneLine(err.Error()), yamlForms)
		}
		return j, nil
	case formatText:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; text/* values must be valid UTF-8", invalidUTF8(v))
		}
		return nil, nil
	}
	return nil, nil
}

// jsonSyntax returns nil if v is one valid JSON document, else an error
// giving the line, column and byte offset of the problem.
func jsonSyntax(v []byte) error {
	if json.Valid(v) {
		return nil
	}
	var x any
	err := json.Unmarshal(v, &x)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset counts the bytes read, including the offending one.
		pos := se.Offset - 1
		if pos < 0 || se.Offset >= int64(len(v)) && strings.Contains(se.Error(), "end of JSON input") {
			pos = int64(len(v))
		}
		line, col := lineCol(v, pos)
		return fmt.Errorf("invalid JSON at line %d, column %d (byte offset %d): %s", line, col, pos, se.Error())
	}
	if err == nil {
		// json.Valid and json.Unmarshal disagree only on edge cases; keep a
		// message that still says what is wrong.
		err = errors.New("not a single JSON document")
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

// lineCol converts a 0-based byte offset to a 1-based line and column.
func lineCol(v []byte, off int64) (line, col int) {
	off = min(off, int64(len(v)))
	before := v[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// invalidUTF8 returns the offset of the first invalid UTF-8 sequence in v.
func invalidUTF8(v []byte) int {
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(v)
}

// oneLine collapses runs of white space, including newlines, to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
