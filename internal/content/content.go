// Package content is the canonical form of a namespace's properties: an
// immutable, key-sorted snapshot, its checksum, patches between snapshots and
// their application, and a version (a snapshot with its identity and
// metadata). Control, distributors, agents and consumers all use it, so a
// checksum computed anywhere agrees everywhere.
//
// Checksum algorithm (also in docs/wire.md, "Checksums"): SHA-256 over
//
//	"lehr-content-v1\n"
//	for each property in ascending byte order of key:
//	    uvarint(len(key))  key
//	    uvarint(len(content_type))  content_type
//	    uvarint(len(value))  value
//
// written as "sha256:" followed by 64 lowercase hex digits. The empty
// namespace has a checksum too.
package content

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"

	"lehr.dev/lehr/proto/lehrpb"
)

// Property is one key of a namespace. Values are shared, never modified.
type Property struct {
	Key         string
	ContentType string
	Value       []byte
}

// Size is the number of bytes the property counts against size limits.
func (p Property) Size() int64 { return int64(len(p.Key) + len(p.Value)) }

// Equal reports whether two properties have the same key, type and value.
func (p Property) Equal(q Property) bool {
	return p.Key == q.Key && p.ContentType == q.ContentType && bytes.Equal(p.Value, q.Value)
}

// Snapshot is an immutable set of properties sorted by key. The zero value is
// the empty snapshot.
type Snapshot struct {
	props []Property
}

// ErrDuplicateKey is wrapped by errors about a key given twice.
var ErrDuplicateKey = errors.New("content: duplicate key")

// ErrMissingKey is wrapped by errors about deleting a key that is not there.
var ErrMissingKey = errors.New("content: key not present")

// KeyError says which key an error is about.
type KeyError struct {
	Key string
	Err error // ErrDuplicateKey or ErrMissingKey
	// Where the key came from: "properties", "set" or "delete".
	Field string
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: %q in %s", e.Err, e.Key, e.Field) }
func (e *KeyError) Unwrap() error { return e.Err }

// New returns a snapshot of props. props is copied; values are not. Keys must
// be unique; names are not validated here (see package names).
func New(props []Property) (Snapshot, error) {
	ps := slices.Clone(props)
	slices.SortFunc(ps, func(a, b Property) int { return strings.Compare(a.Key, b.Key) })
	for i := 1; i < len(ps); i++ {
		if ps[i].Key == ps[i-1].Key {
			return Snapshot{}, &KeyError{Key: ps[i].Key, Err: ErrDuplicateKey, Field: "properties"}
		}
	}
	return Snapshot{props: ps}, nil
}

// Len is the number of properties.
func (s Snapshot) Len() int { return len(s.props) }

// Props returns the properties in key order. The slice is shared: do not
// modify it.
func (s Snapshot) Props() []Property { return s.props }

// Keys returns the keys in order.
func (s Snapshot) Keys() []string {
	keys := make([]string, len(s.props))
	for i, p := range s.props {
		keys[i] = p.Key
	}
	return keys
}

// Get returns the property with the given key.
func (s Snapshot) Get(key string) (Property, bool) {
	i, ok := slices.BinarySearchFunc(s.props, key, func(p Property, k string) int { return strings.Compare(p.Key, k) })
	if !ok {
		return Property{}, false
	}
	return s.props[i], true
}

// Size is the total bytes of keys and values.
func (s Snapshot) Size() int64 {
	var n int64
	for _, p := range s.props {
		n += p.Size()
	}
	return n
}

// Checksum returns the canonical checksum of the snapshot.
func (s Snapshot) Checksum() string {
	h := sha256.New()
	h.Write([]byte("lehr-content-v1\n"))
	for _, p := range s.props {
		writeField(h, []byte(p.Key))
		writeField(h, []byte(p.ContentType))
		writeField(h, p.Value)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func writeField(h hash.Hash, b []byte) {
	var buf [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(buf[:], uint64(len(b)))
	h.Write(buf[:n])
	h.Write(b)
}

// Equal reports whether two snapshots hold the same properties.
func (s Snapshot) Equal(t Snapshot) bool {
	return slices.EqualFunc(s.props, t.props, Property.Equal)
}

// Patch sets and deletes keys. The zero Patch changes nothing.
type Patch struct {
	Set    []Property
	Delete []string
}

// Empty reports whether the patch changes nothing.
func (p Patch) Empty() bool { return len(p.Set) == 0 && len(p.Delete) == 0 }

// Size is the bytes of the set properties plus the deleted keys.
func (p Patch) Size() int64 {
	var n int64
	for _, q := range p.Set {
		n += q.Size()
	}
	for _, k := range p.Delete {
		n += int64(len(k))
	}
	return n
}

// Apply returns s with p applied. A key may appear once across Set and
// Delete; every deleted key must exist in s.
func (s Snapshot) Apply(p Patch) (Snapshot, error) {
	seen := make(map[string]string, len(p.Set)+len(p.Delete))
	for _, q := range p.Set {
		if _, dup := seen[q.Key]; dup {
			return Snapshot{}, &KeyError{Key: q.Key, Err: ErrDuplicateKey, Field: "set"}
		}
		seen[q.Key] = "set"
	}
	for _, k := range p.Delete {
		if _, dup := seen[k]; dup {
			return Snapshot{}, &KeyError{Key: k, Err: ErrDuplicateKey, Field: "delete"}
		}
		seen[k] = "delete"
		if _, ok := s.Get(k); !ok {
			return Snapshot{}, &KeyError{Key: k, Err: ErrMissingKey, Field: "delete"}
		}
	}
	out := make([]Property, 0, len(s.props)+len(p.Set))
	for _, q := range s.props {
		if _, touched := seen[q.Key]; !touched {
			out = append(out, q)
		}
	}
	out = append(out, p.Set...)
	slices.SortFunc(out, func(a, b Property) int { return strings.Compare(a.Key, b.Key) })
	return Snapshot{props: out}, nil
}

// Diff returns the patch that turns from into to: Set holds added and
// changed properties, Delete the removed keys, both sorted by key.
// from.Apply(Diff(from, to)) equals to.
func Diff(from, to Snapshot) Patch {
	var p Patch
	for _, c := range Changes(from, to) {
		if c.New == nil {
			p.Delete = append(p.Delete, c.Key)
		} else {
			p.Set = append(p.Set, *c.New)
		}
	}
	return p
}

// Change is one key that differs between two snapshots. Old is nil for an
// added key, New is nil for a removed one.
type Change struct {
	Key      string
	Old, New *Property
}

// Changes lists the keys that differ between from and to, in key order.
func Changes(from, to Snapshot) []Change {
	var out []Change
	a, b := from.props, to.props
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Key < b[j].Key):
			out = append(out, Change{Key: a[i].Key, Old: &a[i]})
			i++
		case i == len(a) || b[j].Key < a[i].Key:
			out = append(out, Change{Key: b[j].Key, New: &b[j]})
			j++
		default:
			if !a[i].Equal(b[j]) {
				out = append(out, Change{Key: a[i].Key, Old: &a[i], New: &b[j]})
			}
			i++
			j++
		}
	}
	return out
}

// FromProto converts wire properties. It does not validate names.
func FromProto(ps []*lehrpb.Property) []Property {
	out := make([]Property, len(ps))
	for i, p := range ps {
		out[i] = Property{Key: p.GetKey(), ContentType: p.GetContentType(), Value: p.GetValue()}
	}
	return out
}

// ToProto converts properties to their wire form. Values are shared.
func ToProto(ps []Property) []*lehrpb.Property {
	out := make([]*lehrpb.Property, len(ps))
	for i, p := range ps {
		out[i] = &lehrpb.Property{Key: p.Key, ContentType: p.ContentType, Value: p.Value}
	}
	return out
}

// ChangesToProto converts changes to their wire form, in the same order.
func ChangesToProto(changes []Change) []*lehrpb.PropertyChange {
	out := make([]*lehrpb.PropertyChange, 0, len(changes))
	for _, c := range changes {
		pc := &lehrpb.PropertyChange{Key: c.Key}
		switch {
		case c.Old == nil:
			pc.Kind = lehrpb.PropertyChange_KIND_ADDED
		case c.New == nil:
			pc.Kind = lehrpb.PropertyChange_KIND_REMOVED
		default:
			pc.Kind = lehrpb.PropertyChange_KIND_MODIFIED
		}
		if c.Old != nil {
			pc.Old = ToProto([]Property{*c.Old})[0]
		}
		if c.New != nil {
			pc.New = ToProto([]Property{*c.New})[0]
		}
		out = append(out, pc)
	}
	return out
}
