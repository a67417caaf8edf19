package jsonyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds of every YAML conversion. A YAML document can make its reader do
// far more work than its size (aliases expanding aliases: 342 bytes of
// "billion laughs" are 387 million nodes), so conversion stops at these.
const (
	// MaxYAMLBytes bounds the document itself (the largest namespace a
	// publish may carry is 16 MiB).
	MaxYAMLBytes = 64 << 20
	// MaxYAMLNodes bounds the nodes visited, every alias expansion counted
	// again.
	MaxYAMLNodes = 1_000_000
	// MaxYAMLDepth bounds the nesting of lists and mappings.
	MaxYAMLDepth = 256
	// MaxJSONBytes bounds the JSON a conversion produces.
	MaxJSONBytes = 64 << 20
)

// Member is one key of a YAML mapping, as ParseYAMLObject returns it.
type Member struct {
	Key string
	// Line is where the key is written, for error messages.
	Line int
	// Text says the value is a string scalar (Value is the string);
	// otherwise Value is the value as compact JSON.
	Text  bool
	Value []byte
}

// ParseYAMLObject parses a YAML document whose top level is a mapping and
// returns its members in document order: the keys taken literally, each
// value as text or JSON (see Member). It follows YAML 1.2
// (go.yaml.in/yaml/v3): keys are strings as written (a key "n" or "on" is
// not a boolean), plain scalars other than true, false, null and numbers
// are strings, and the order of nested mapping keys is kept. Duplicate
// keys, merge keys (<<), non-scalar keys and documents beyond the first
// are errors, and so is going beyond the bounds above.
func ParseYAMLObject(data []byte) ([]Member, error) {
	top, err := decodeYAML(data)
	if err != nil {
		return nil, err
	}
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("top level is %s; want a mapping of keys to values, e.g. \"key: value\"", yamlKind(top))
	}
	c := &converter{}
	var out []Member
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := resolve(top.Content[i]), resolve(top.Content[i+1])
		key, err := yamlKey(k)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice (line %d)", key, k.Line)
		}
		seen[key] = true
		if v.Kind == yaml.ScalarNode && isString(v) {
			out = append(out, Member{Key: key, Line: k.Line, Text: true, Value: []byte(v.Value)})
			continue
		}
		var buf bytes.Buffer
		if err := c.convert(&buf, v, 1); err != nil {
			return nil, fmt.Errorf("value of key %q: %w", key, err)
		}
		out = append(out, Member{Key: key, Line: k.Line, Value: buf.Bytes()})
	}
	return out, nil
}

// YAMLToJSON converts one YAML document to compact JSON under the same
// rules and bounds as ParseYAMLObject.
func YAMLToJSON(data []byte) ([]byte, error) {
	top, err := decodeYAML(data)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := (&converter{}).convert(&buf, top, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeYAML parses exactly one document and returns its root node.
func decodeYAML(data []byte) (*yaml.Node, error) {
	if len(data) > MaxYAMLBytes {
		return nil, fmt.Errorf("YAML document of %d bytes; at most %d", len(data), MaxYAMLBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // no document at all: null
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, nil
		}
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("invalid YAML: more than one document; want one")
	}
	top := resolve(&doc)
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = resolve(top.Content[0])
	}
	return top, nil
}

// converter writes YAML nodes as JSON within the bounds.
type converter struct {
	nodes int
	out   int
}

func (c *converter) convert(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if c.nodes++; c.nodes > MaxYAMLNodes {
		return fmt.Errorf("aliases expand to more than %d nodes; write the values out or use fewer aliases", MaxYAMLNodes)
	}
	if depth > MaxYAMLDepth {
		return fmt.Errorf("line %d: lists and mappings nested deeper than %d", n.Line, MaxYAMLDepth)
	}
	if buf.Len() > MaxJSONBytes {
		return fmt.Errorf("converts to more than %d bytes of JSON", MaxJSONBytes)
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, err := yamlKey(resolve(n.Content[i]))
			if err != nil {
				return err
			}
			if seen[key] {
				return fmt.Errorf("key %q appears twice (line %d)", key, n.Content[i].Line)
			}
			seen[key] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(key)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := c.convert(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := c.convert(buf, e, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		if isString(n) {
			b, _ := json.Marshal(n.Value)
			buf.Write(b)
			return nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %q has no JSON form (%v)", n.Line, n.Value, err)
		}
		buf.Write(b)
	case yaml.DocumentNode:
		buf.WriteString("null") // an empty document
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
	case yaml.DocumentNode:
		return "an empty document"
	}
	return "not a mapping"
}

// yamlKey returns a mapping key as written.
func yamlKey(k *yaml.Node) (string, error) {
	if k.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("line %d: a key must be a scalar, not a list or mapping", k.Line)
	}
	if k.Tag == "!!merge" {
		return "", fmt.Errorf("line %d: merge keys (<<) are not supported; write the keys out", k.Line)
	}
	return k.Value, nil
}

// isString reports whether a scalar is text: strings, timestamps and
// anything else that is not null, a boolean or a number.
func isString(n *yaml.Node) bool {
	switch n.Tag {
	case "!!null", "!!bool", "!!int", "!!float":
		return false
	}
	return true
}
