package utf8field_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"lehr.dev/lehr/internal/utf8field"
	"lehr.dev/lehr/proto/lehrpb"
)

// Each case names the one field that is not UTF-8, in the message and in
// its wire encoding — which protobuf would not even produce, so the wire
// form is built by hand from the valid message by appending the field.
func TestFind(t *testing.T) {
	const bad = "caf\xe9"
	for _, tc := range []struct {
		name string
		m    *lehrpb.PublishRequest
		want string
	}{
		{"valid", &lehrpb.PublishRequest{Namespace: "a/b", Message: "café", Properties: []*lehrpb.Property{{Key: "k", Value: []byte("\xff")}}}, ""},
		{"message", &lehrpb.PublishRequest{Namespace: "a/b", Message: bad}, "message"},
		{"a key", &lehrpb.PublishRequest{Namespace: "a/b", Properties: []*lehrpb.Property{{Key: "k"}, {Key: bad}}}, "properties[1].key"},
		{"a content type", &lehrpb.PublishRequest{Namespace: "a/b", Properties: []*lehrpb.Property{{Key: "k", ContentType: bad}}}, "properties[0].content_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := utf8field.Find(tc.m); got != tc.want {
				t.Errorf("Find = %q, want %q", got, tc.want)
			}
			if got := utf8field.FindWire(wire(t, tc.m), tc.m.ProtoReflect().Descriptor()); got != tc.want {
				t.Errorf("FindWire = %q, want %q", got, tc.want)
			}
		})
	}
	labels := &lehrpb.Hello{HostId: "h", Labels: map[string]string{"role": bad}}
	if got := utf8field.Find(labels); got != "labels[role]" {
		t.Errorf("Find(a map value) = %q, want labels[role]", got)
	}
}

// wire encodes m field by field, without protobuf's UTF-8 check: the
// namespace, the message and the properties of a PublishRequest.
func wire(t *testing.T, m *lehrpb.PublishRequest) []byte {
	t.Helper()
	var b []byte
	str := func(b []byte, n protowire.Number, s string) []byte {
		if s == "" {
			return b
		}
		b = protowire.AppendTag(b, n, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	fields := m.ProtoReflect().Descriptor().Fields()
	b = str(b, fields.ByName("namespace").Number(), m.GetNamespace())
	for _, p := range m.GetProperties() {
		var pb []byte
		pf := p.ProtoReflect().Descriptor().Fields()
		pb = str(pb, pf.ByName("key").Number(), p.GetKey())
		pb = str(pb, pf.ByName("content_type").Number(), p.GetContentType())
		pb = protowire.AppendTag(pb, pf.ByName("value").Number(), protowire.BytesType)
		pb = protowire.AppendBytes(pb, p.GetValue())
		b = protowire.AppendTag(b, fields.ByName("properties").Number(), protowire.BytesType)
		b = protowire.AppendBytes(b, pb)
	}
	b = str(b, fields.ByName("message").Number(), m.GetMessage())
	return b
}
