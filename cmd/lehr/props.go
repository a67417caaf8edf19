package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/jsonyaml"
)

// Content types the CLI assigns.
const (
	ctText = "text/plain"
	ctJSON = "application/json"
	ctYAML = "application/yaml"
	ctBin  = "application/octet-stream"
)

// fileFormatHelp documents the push file format; push --help prints it.
const fileFormatHelp = `The file is a JSON or YAML object mapping each key to its value:

  {"greeting": "hello", "limits/rps": 100, "features": {"dark_mode": true}}

A string value is stored as-is, with content type text/plain. Any other
value (object, array, number, boolean, null) is stored as its compact JSON
encoding, with content type application/json ("limits/rps" above becomes
100, "features" becomes {"dark_mode":true}). The format follows the file
extension (.json, .yaml, .yml); for "--file -" (standard input) and other
extensions it is JSON if the input parses as JSON, YAML otherwise. A key may
appear only once.`

// fileFormat is how to read a property file.
type fileFormat int

const (
	formatSniff fileFormat = iota
	formatJSON
	formatYAML
)

func formatOf(path string) fileFormat {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return formatJSON
	case ".yaml", ".yml":
		return formatYAML
	}
	return formatSniff
}

// readInput reads a file named on the command line, "-" being standard
// input, and returns its bytes and a name for messages.
func readInput(path string, stdin io.Reader) (data []byte, name string, err error) {
	if path == "-" {
		data, err = io.ReadAll(stdin)
		name = "standard input"
	} else {
		data, err = os.ReadFile(path)
		name = path
	}
	if err != nil {
		return nil, name, fmt.Errorf("read %s: %w", name, err)
	}
	return data, name, nil
}

// readPropertiesFile reads path ("-" for r) and parses it.
func readPropertiesFile(path string, stdin io.Reader) ([]producer.Property, error) {
	data, name, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	props, err := parseProperties(data, formatOf(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return props, nil
}

// parseProperties parses a property file in the given format. The result is
// sorted by key.
func parseProperties(data []byte, f fileFormat) ([]producer.Property, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New(`empty; want an object mapping keys to values, e.g. {"key": "value"}`)
	}
	switch f {
	case formatJSON:
		return parseJSONObject(data)
	case formatYAML:
		return parseYAMLObject(data)
	}
	if json.Valid(data) {
		return parseJSONObject(data)
	}
	props, err := parseYAMLObject(data)
	if err != nil {
		return nil, fmt.Errorf("neither valid JSON nor valid YAML: %w", err)
	}
	return props, nil
}

// parseYAMLObject parses a YAML document whose top level is a mapping
// (jsonyaml.ParseYAMLObject: YAML 1.2, key order kept, expansion bounded):
// string scalars become text properties, everything else JSON.
func parseYAMLObject(data []byte) ([]producer.Property, error) {
	members, err := jsonyaml.ParseYAMLObject(data)
	if err != nil {
		return nil, err
	}
	props := make([]producer.Property, 0, len(members))
	for _, m := range members {
		ct := ctJSON
		if m.Text {
			ct = ctText
		}
		props = append(props, producer.Property{Key: m.Key, Value: m.Value, ContentType: ct})
	}
	slices.SortFunc(props, func(a, b producer.Property) int { return strings.Compare(a.Key, b.Key) })
	return props, nil
}

// parseJSONObject decodes a top-level JSON object, keeping each value's raw
// encoding and rejecting duplicate keys.
func parseJSONObject(data []byte) ([]producer.Property, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("top level is %s; want an object mapping keys to values, e.g. {\"key\": \"value\"}", jsonKind(tok))
	}
	var props []producer.Property
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %w", err)
		}
		key := tok.(string) // object keys are always strings
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("invalid JSON value of key %q: %w", key, err)
		}
		p, err := jsonProperty(key, raw)
		if err != nil {
			return nil, err
		}
		props = append(props, p)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: data after the top-level object")
	}
	slices.SortFunc(props, func(a, b producer.Property) int { return strings.Compare(a.Key, b.Key) })
	return props, nil
}

// jsonProperty turns one file entry into a property: strings verbatim as
// text, anything else as compact JSON.
func jsonProperty(key string, raw json.RawMessage) (producer.Property, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return producer.Property{}, fmt.Errorf("invalid string value of key %q: %w", key, err)
		}
		return producer.Property{Key: key, Value: []byte(s), ContentType: ctText}, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return producer.Property{}, fmt.Errorf("invalid JSON value of key %q: %w", key, err)
	}
	return producer.Property{Key: key, Value: buf.Bytes(), ContentType: ctJSON}, nil
}

func jsonKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "a " + string(v)
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// splitAssign splits "key=value" for the flag named flag.
func splitAssign(flag, s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return "", "", fmt.Errorf("--%s %q: want KEY=VALUE", flag, s)
	}
	return key, value, nil
}

// patchFlags are the change flags of "lehr patch", in the order given.
type patchFlags struct {
	set, setJSON, setFile, del stringList
}

// build turns the flags into a patch. Keys given twice are rejected here,
// with the flags that named them.
func (pf *patchFlags) build() (producer.Patch, error) {
	var p producer.Patch
	from := map[string]string{}
	claim := func(key, flag string) error {
		if prev, dup := from[key]; dup {
			return fmt.Errorf("key %q given twice (--%s and --%s); a patch changes each key once", key, prev, flag)
		}
		from[key] = flag
		return nil
	}
	for _, s := range pf.set {
		k, v, err := splitAssign("set", s)
		if err != nil {
			return p, err
		}
		if err := claim(k, "set"); err != nil {
			return p, err
		}
		p.Set = append(p.Set, producer.Property{Key: k, Value: []byte(v), ContentType: ctText})
	}
	for _, s := range pf.setJSON {
		k, v, err := splitAssign("set-json", s)
		if err != nil {
			return p, err
		}
		if err := claim(k, "set-json"); err != nil {
			return p, err
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(v)); err != nil {
			return p, fmt.Errorf("--set-json %s: value is not valid JSON (%v); quote it for the shell, e.g. --set-json '%s={\"a\":1}'", k, err, k)
		}
		p.Set = append(p.Set, producer.Property{Key: k, Value: buf.Bytes(), ContentType: ctJSON})
	}
	for _, s := range pf.setFile {
		k, path, err := splitAssign("set-file", s)
		if err != nil {
			return p, err
		}
		if err := claim(k, "set-file"); err != nil {
			return p, err
		}
		path = strings.TrimPrefix(path, "@")
		data, err := os.ReadFile(path)
		if err != nil {
			return p, fmt.Errorf("--set-file %s: %w", k, err)
		}
		p.Set = append(p.Set, producer.Property{Key: k, Value: data, ContentType: contentTypeOfFile(path, data)})
	}
	for _, k := range pf.del {
		if k == "" {
			return p, errors.New("--delete: empty key")
		}
		if err := claim(k, "delete"); err != nil {
			return p, err
		}
		p.Delete = append(p.Delete, k)
	}
	return p, nil
}

// contentTypeOfFile guesses a content type from a file's extension and
// content.
func contentTypeOfFile(path string, data []byte) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return ctJSON
	case ".yaml", ".yml":
		return ctYAML
	}
	if utf8.Valid(data) {
		return ctText
	}
	return ctBin
}
