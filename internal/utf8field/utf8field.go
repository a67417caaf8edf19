// Package utf8field names the string field of a protobuf message that is
// not valid UTF-8. Protobuf refuses to marshal or parse such a message,
// and gRPC reports that as INTERNAL without saying where; with the field's
// path ("properties[2].key", "message") a client (client/producer) and
// control (control/service) refuse it as INVALID_ARGUMENT naming it.
//
// Paths use protobuf field names: "a.b" for a nested message, "a[2]" for
// the third element of a list, "a[k]" for the value of map key k.
//
// Importable by any package; it imports only protobuf.
package utf8field

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Find returns the path of a string field of m that is not valid UTF-8 —
// the first in field order, depth first — or "" when every string is.
func Find(m proto.Message) string {
	if m == nil {
		return ""
	}
	return find(m.ProtoReflect(), "")
}

func find(m protoreflect.Message, prefix string) string {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if !m.Has(fd) {
			continue
		}
		v, name := m.Get(fd), prefix+string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for j := range l.Len() {
				if p := value(fd, l.Get(j), name+"["+strconv.Itoa(j)+"]"); p != "" {
					return p
				}
			}
		case fd.IsMap():
			var bad string
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					bad = name + " (a key)"
					return false
				}
				bad = value(fd.MapValue(), mv, fmt.Sprintf("%s[%v]", name, k.Interface()))
				return bad == ""
			})
			if bad != "" {
				return bad
			}
		default:
			if p := value(fd, v, name); p != "" {
				return p
			}
		}
	}
	return ""
}

// value checks one value of field fd, named name.
func value(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return name
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return find(v.Message(), name+".")
	}
	return ""
}

// FindWire is Find for b, the wire encoding of a message of type md that
// may not parse because of it. It returns "" when no string field of b is
// invalid UTF-8, or b is malformed before one is found.
func FindWire(b []byte, md protoreflect.MessageDescriptor) string {
	return findWire(b, md, "")
}

func findWire(b []byte, md protoreflect.MessageDescriptor, prefix string) string {
	index := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		name := prefix + string(fd.Name())
		if fd.IsList() {
			name += "[" + strconv.Itoa(index[num]) + "]"
			index[num]++
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return name
			}
		case protoreflect.MessageKind:
			if p := findWire(v, fd.Message(), name+"."); p != "" {
				return p
			}
		}
	}
	return ""
}
