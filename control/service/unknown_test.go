package service

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// junk is an unknown field (number 9999) of n bytes.
func junk(n int) protoreflect.RawFields {
	b := protowire.AppendTag(nil, 9999, protowire.BytesType)
	return protowire.AppendBytes(b, make([]byte, n))
}

func TestDiscardUnknown(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{"a": map[string]any{"b": []any{map[string]any{"c": 1.0}}}})
	if err != nil {
		t.Fatal(err)
	}
	clean := []proto.Message{
		&lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d", Acl: &lehrpb.Acl{Admins: []string{"a"}}, Quotas: &lehrpb.Quotas{MaxNamespaces: 2}}},
		&lehrpb.SetRolloutPolicyRequest{Scope: "d", Policy: &lehrpb.RolloutPolicy{
			Stages:        []*lehrpb.RolloutStage{{Name: "one", Bake: durationpb.New(0)}, {Name: "two"}},
			FreezeWindows: []*lehrpb.FreezeWindow{{Reason: "r", Weekly: &lehrpb.WeeklyWindow{Days: []string{"sat"}}}},
		}},
		st, // a map whose values are messages
	}
	// Every message of each request gets an unknown field.
	withJunk := func(m proto.Message) proto.Message {
		m = proto.Clone(m)
		var walk func(protoreflect.Message)
		walk = func(m protoreflect.Message) {
			m.SetUnknown(junk(100))
			m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
				switch {
				case fd.IsMap():
					if fd.MapValue().Message() != nil {
						v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { walk(mv.Message()); return true })
					}
				case fd.IsList():
					if fd.Message() != nil {
						for i := range v.List().Len() {
							walk(v.List().Get(i).Message())
						}
					}
				case fd.Message() != nil:
					walk(v.Message())
				}
				return true
			})
		}
		walk(m.ProtoReflect())
		return m
	}
	for _, want := range clean {
		got := withJunk(want)
		if proto.Equal(got, want) {
			t.Fatalf("%T: the junk did not take", want)
		}
		if !discardUnknown(got.ProtoReflect()) {
			t.Errorf("%T: discardUnknown = false; want true (it had unknown fields)", want)
		}
		if !proto.Equal(got, want) || proto.Size(got) != proto.Size(want) {
			t.Errorf("%T after discardUnknown: %d bytes, %v; want %d bytes, %v", want, proto.Size(got), got, proto.Size(want), want)
		}
		if discardUnknown(got.ProtoReflect()) {
			t.Errorf("%T: discardUnknown twice = true; want false", want)
		}
	}
}
