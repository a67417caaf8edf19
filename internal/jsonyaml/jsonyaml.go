// Package jsonyaml is the one place Lehr turns a property value into JSON:
// which media types are JSON, YAML or text, and the strict conversion of a
// JSON or YAML document to JSON with errors that say where the value is
// wrong. Control's validation, policy rules and the CLI use it.
//
// It imports nothing of Lehr's; any package may import it.
package jsonyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Format is how a value is interpreted according to its content type.
type Format int

// Formats.
const (
	Opaque Format = iota // no content type, or one Lehr does not inspect
	JSON
	YAML
	Text
)

// Allowed forms, quoted in error messages.
const (
	JSONForms = `application/json and "+json" types`
	YAMLForms = `application/yaml, application/x-yaml, text/yaml and "+yaml" types`
)

// FormatOf classifies a media type already lowercased by
// mime.ParseMediaType.
func FormatOf(mediaType string) Format {
	switch {
	case mediaType == "application/json" || strings.HasSuffix(mediaType, "+json"):
		return JSON
	case mediaType == "application/yaml" || mediaType == "application/x-yaml" ||
		mediaType == "text/yaml" || strings.HasSuffix(mediaType, "+yaml"):
		return YAML
	case strings.HasPrefix(mediaType, "text/"):
		return Text
	}
	return Opaque
}

// ToJSON checks a value of format f and, for JSON and YAML, returns it as
// JSON (nil for text and opaque values). Errors say where the value is
// wrong and which form is allowed.
func ToJSON(f Format, v []byte) ([]byte, error) {
	switch f {
	case JSON:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; %s must be UTF-8 JSON (RFC 8259)", invalidUTF8(v), JSONForms)
		}
		if err := CheckJSON(v); err != nil {
			return nil, fmt.Errorf("%w; %s must hold exactly one JSON document (RFC 8259)", err, JSONForms)
		}
		return v, nil
	case YAML:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; %s must be UTF-8 YAML", invalidUTF8(v), YAMLForms)
		}
		j, err := YAMLToJSON(v)
		if err != nil {
			return nil, fmt.Errorf("%s; %s must hold one YAML document (YAML 1.2) with scalar keys, no duplicate keys and no merge keys", oneLine(err.Error()), YAMLForms)
		}
		return j, nil
	case Text:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("invalid UTF-8 at byte offset %d; text/* values must be valid UTF-8", invalidUTF8(v))
		}
		return nil, nil
	}
	return nil, nil
}

// CheckJSON returns nil if v is one valid JSON document, else an error
// giving the line, column and byte offset of the problem.
func CheckJSON(v []byte) error {
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
