package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/internal/jsonyaml"
	"lehr.dev/lehr/proto/lehrpb"
)

// decodeJSON reads lehr's JSON (jsonout.go) into m, failing the test if
// it cannot.
func decodeJSON(t testing.TB, s string, m proto.Message) {
	t.Helper()
	if err := parseJSON(s, m); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
}

// parseJSON reads lehr's JSON (jsonout.go) into m: the inverse of
// marshalJSON, for tests, which check that it loses nothing (a JSON value
// comes back compact, its members sorted).
func parseJSON(s string, m proto.Message) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("lehr's JSON does not parse: %w", err)
	}
	toProtoJSON(m.ProtoReflect().Descriptor(), doc)
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("lehr's JSON is not a %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *keyChange) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key     string `json:"key"`
		Kind    string `json:"kind"`
		Old     any    `json:"old"`
		New     any    `json:"new"`
		OldType string `json:"old_content_type"`
		NewType string `json:"new_content_type"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	*c = keyChange{Key: raw.Key, Kind: raw.Kind, OldType: raw.OldType, NewType: raw.NewType}
	if c.Kind != "added" {
		c.Old = propertyBytes(raw.OldType, raw.Old)
	}
	if c.Kind != "removed" {
		c.New = propertyBytes(raw.NewType, raw.New)
	}
	return nil
}

// toProtoJSON rewrites doc, lehr's JSON of a message of descriptor d, in
// place into protojson's: bytes as base64 strings.
func toProtoJSON(d protoreflect.MessageDescriptor, doc any) {
	obj, ok := doc.(map[string]any)
	if !ok || d.FullName().Parent() == "google.protobuf" {
		return
	}
	for name, v := range obj {
		fd := d.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			continue
		}
		switch {
		case d.FullName() == propertyName && name == "value":
			ct, _ := obj["content_type"].(string)
			obj[name] = base64.StdEncoding.EncodeToString(propertyBytes(ct, v))
		case fd.Kind() == protoreflect.BytesKind && fd.IsList():
			for i, e := range v.([]any) {
				v.([]any)[i] = e.(map[string]any)["base64"]
			}
		case fd.Kind() == protoreflect.BytesKind:
			obj[name] = v.(map[string]any)["base64"]
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			for _, e := range v.(map[string]any) {
				toProtoJSON(fd.MapValue().Message(), e)
			}
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			for _, e := range v.([]any) {
				toProtoJSON(fd.Message(), e)
			}
		case fd.Kind() == protoreflect.MessageKind:
			toProtoJSON(fd.Message(), v)
		}
	}
}

// propertyBytes is the value lehr's JSON v of a property stands for.
func propertyBytes(contentType string, v any) []byte {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		if s, ok := m["base64"].(string); ok {
			if mt, _, err := mime.ParseMediaType(contentType); err != nil || jsonyaml.FormatOf(mt) != jsonyaml.JSON {
				b, _ := base64.StdEncoding.DecodeString(s)
				return b
			}
		}
	}
	if s, ok := v.(string); ok {
		if mt, _, err := mime.ParseMediaType(contentType); err != nil || jsonyaml.FormatOf(mt) != jsonyaml.JSON {
			return []byte(s)
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// lehr's JSON: proto names, 64-bit integers as numbers, property values as
// their content type says, other bytes marked; and it reads back.
func TestMarshalJSONGolden(t *testing.T) {
	v := &lehrpb.GetResponse{
		Version: &lehrpb.VersionInfo{
			Namespace: "demo/app", Seq: 1 << 40, Checksum: "sha256:abc", Author: "alice <a&b>", CreateTime: ts(0),
			Source: lehrpb.VersionSource_VERSION_SOURCE_PATCH, Parent: 3, SizeBytes: 9007199254740993, PropertyCount: 7,
			Signature: []byte{0, 1, 2, 250}, SignatureKeyId: "k1",
		},
		Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Properties: []*lehrpb.Property{
			{Key: "features", ContentType: "application/json", Value: []byte(`{"dark_mode": true, "big": 12345678901234567890}`)},
			{Key: "limits/rps", ContentType: "application/json; charset=utf-8", Value: []byte(`250`)},
			{Key: "string", ContentType: "application/vnd.x+json", Value: []byte(`"a string"`)},
			{Key: "greeting", ContentType: "text/plain", Value: []byte("hello\n\x1b[31m")},
			{Key: "config.yaml", ContentType: "application/yaml", Value: []byte("a: 1\n")},
			{Key: "empty", ContentType: "text/plain"},
			{Key: "blob", ContentType: "application/octet-stream", Value: []byte{0, 1, 2}},
			{Key: "untyped", Value: []byte("text")},
			{Key: "bad-json", ContentType: "application/json", Value: []byte("{")},
			{Key: "bad-text", ContentType: "text/plain", Value: []byte{0xff}},
			{Key: "bad-type", ContentType: ";;", Value: []byte("x")},
		},
	}
	var b bytes.Buffer
	for _, m := range []proto.Message{
		v,
		&lehrpb.RolloutStage{Name: "canary", Bake: durationpb.New(90 * time.Second), MaxErrorRatio: 0.01,
			Target: &lehrpb.RolloutStage_Canary{Canary: &lehrpb.CanaryTarget{Hosts: 1, Zones: []string{"a", "b"}}}},
		&lehrpb.PolicyExperiment{Name: "x", Annotations: map[string]string{"z": "1", "a": "2"}},
		&lehrpb.CanaryCheck{Name: "nan", Expected: math.NaN(), Tolerance: math.Inf(1)},
	} {
		out, err := marshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
		b.WriteByte('\n')
	}
	golden(t, "json-shape", b.Bytes())

	// It reads back: everything but the JSON values' spacing and member
	// order, and a JSON-typed value that is not JSON (control refuses
	// those).
	v.Properties = slices.DeleteFunc(v.Properties, func(p *lehrpb.Property) bool { return p.Key == "bad-json" })
	out, err := marshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	var got lehrpb.GetResponse
	decodeJSON(t, string(out), &got)
	want := proto.CloneOf(v)
	want.Properties[0].Value = []byte(`{"big":12345678901234567890,"dark_mode":true}`)
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}
