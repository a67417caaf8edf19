package main

// lehr's JSON (-o json), one shape for every command (docs/cli.md, "JSON
// output"): the proto3 JSON mapping of the API's messages with the fields'
// proto names (snake_case, as in proto/lehr/v1 and in the rollout-policy
// and canary files people write), with three changes that make it read as
// what it holds:
//
//   - 64-bit integers are numbers, not strings: versions, sizes, counts,
//     revisions (every one of them is below 2^53, exact in any JSON
//     reader);
//   - a property's value is what its content type says it is: the JSON
//     itself for JSON types (application/json, +json), a string for text
//     types (text/*, YAML types), and {"base64": "…"} for any other value
//     (and one whose bytes are not what its type says);
//   - any other bytes (a version's signature) are {"base64": "…"}.
//
// A property's value is always there, "" for empty text; control refuses
// a JSON-typed value that is not JSON, so {"base64": …} in a property of
// a JSON type is that JSON object.
//
// Fields at their zero value are left out, as protojson does; enums are
// their value names; timestamps RFC 3339 strings; durations "1.5s".

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"sort"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/internal/jsonyaml"
	"lehr.dev/lehr/proto/lehrpb"
)

// propertyName is the message whose bytes field value is read by its
// content type.
var propertyName = (&lehrpb.Property{}).ProtoReflect().Descriptor().FullName()

// printJSON writes m as lehr's JSON, indented, and a newline.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := marshalJSON(m)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// marshalJSON returns m as lehr's JSON, indented by two spaces.
func marshalJSON(m proto.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeMessage(&b, m.ProtoReflect()); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func encodeMessage(b *bytes.Buffer, m protoreflect.Message) error {
	d := m.Descriptor()
	if d.FullName().Parent() == "google.protobuf" {
		// Well-known types: their JSON mapping (timestamps, durations, …).
		js, err := protojson.Marshal(m.Interface())
		if err != nil {
			return err
		}
		b.Write(js)
		return nil
	}
	b.WriteByte('{')
	first := true
	fields := d.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		isValue := d.FullName() == propertyName && fd.Name() == "value"
		if !m.Has(fd) && !isValue { // a property's value, even empty
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, string(fd.Name()))
		b.WriteByte(':')
		var err error
		switch {
		case isValue:
			writePropertyValue(b, m.Get(d.Fields().ByName("content_type")).String(), m.Get(fd).Bytes())
		case fd.IsList():
			err = encodeList(b, fd, m.Get(fd).List())
		case fd.IsMap():
			err = encodeMap(b, fd, m.Get(fd).Map())
		default:
			err = encodeValue(b, fd, m.Get(fd))
		}
		if err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func encodeList(b *bytes.Buffer, fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	b.WriteByte('[')
	for i := range l.Len() {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeValue(b, fd, l.Get(i)); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

func encodeMap(b *bytes.Buffer, fd protoreflect.FieldDescriptor, mp protoreflect.Map) error {
	var keys []protoreflect.MapKey
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k.String())
		b.WriteByte(':')
		if err := encodeValue(b, fd.MapValue(), mp.Get(k)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// encodeValue writes one value of field fd (an element, for a list).
func encodeValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		switch f := v.Float(); {
		case math.IsNaN(f):
			b.WriteString(`"NaN"`)
		case math.IsInf(f, 1):
			b.WriteString(`"Infinity"`)
		case math.IsInf(f, -1):
			b.WriteString(`"-Infinity"`)
		default:
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case protoreflect.StringKind:
		writeString(b, v.String())
	case protoreflect.BytesKind:
		writeBase64(b, v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			writeString(b, string(ev.Name()))
		} else {
			b.WriteString(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return encodeMessage(b, v.Message())
	default:
		return fmt.Errorf("field %s: kind %v not supported", fd.FullName(), fd.Kind())
	}
	return nil
}

// writePropertyValue writes a property's value as its content type says:
// the JSON for JSON types, a string for text, else bytes marked as such.
func writePropertyValue(b *bytes.Buffer, contentType string, v []byte) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		writeBase64(b, v)
		return
	}
	switch jsonyaml.FormatOf(mt) {
	case jsonyaml.JSON:
		var c bytes.Buffer
		if json.Compact(&c, v) == nil {
			b.Write(c.Bytes())
			return
		}
	case jsonyaml.Text, jsonyaml.YAML:
		if utf8.Valid(v) {
			writeString(b, string(v))
			return
		}
	}
	writeBase64(b, v)
}

// writeBase64 writes bytes marked as such: {"base64": "…"}.
func writeBase64(b *bytes.Buffer, v []byte) {
	b.WriteString(`{"base64":`)
	writeString(b, base64.StdEncoding.EncodeToString(v))
	b.WriteByte('}')
}

// writeString writes s as a JSON string, <, > and & as they are. Text
// that is not UTF-8 (control never stores such text) has its bad bytes
// replaced.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}
