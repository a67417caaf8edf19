package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

const (
	metaPrefix = "m/"
	propPrefix = "p/"
)

func metaKey(ns string) []byte { return []byte(metaPrefix + ns) }

// nsPropPrefix is the prefix of every property of ns, of any generation.
func nsPropPrefix(ns string) []byte { return []byte(propPrefix + ns + "/") }

// genPrefix is the prefix of the properties of ns in generation gen.
func genPrefix(ns string, gen uint64) []byte {
	return fmt.Appendf(nil, "%s%s/%016x/", propPrefix, ns, gen)
}

func propKey(ns string, gen uint64, key string) []byte {
	return append(genPrefix(ns, gen), key...)
}

// parsePropKey splits a property key into namespace and generation.
func parsePropKey(k []byte) (ns string, gen uint64, ok bool) {
	rest, ok := strings.CutPrefix(string(k), propPrefix)
	if !ok {
		return "", 0, false
	}
	parts := strings.SplitN(rest, "/", 4) // domain, name, gen, key
	if len(parts) != 4 || len(parts[2]) != 16 {
		return "", 0, false
	}
	gen, err := strconv.ParseUint(parts[2], 16, 64)
	if err != nil {
		return "", 0, false
	}
	return parts[0] + "/" + parts[1], gen, true
}

// record is what the meta key holds: the version's identity and metadata,
// and where its properties are.
type record struct {
	Ref   content.Ref
	Kind  lehrpb.NamespaceKind
	Info  *lehrpb.VersionInfo
	gen   uint64 // generation holding the properties
	count uint64 // number of properties
	// snap is the content, when the record was made from it (not stored).
	snap content.Snapshot
}

// version is the content.Version rec describes, holding snap.
func (r record) version(ns string, snap content.Snapshot) content.Version {
	return content.Version{Namespace: ns, Seq: r.Ref.Seq, Checksum: r.Ref.Checksum, Kind: r.Kind, Info: r.Info, Content: snap}
}

const recordFormat = 1

func encodeRecord(r record) ([]byte, error) {
	var info []byte
	if r.Info != nil {
		var err error
		if info, err = proto.Marshal(r.Info); err != nil {
			return nil, fmt.Errorf("marshal version info: %w", err)
		}
	}
	b := []byte{recordFormat}
	b = binary.AppendUvarint(b, r.Ref.Seq)
	b = binary.AppendUvarint(b, r.gen)
	b = binary.AppendUvarint(b, uint64(r.Kind))
	b = binary.AppendUvarint(b, r.count)
	b = appendBytes(b, []byte(r.Ref.Checksum))
	b = appendBytes(b, info)
	return b, nil
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) == 0 || b[0] != recordFormat {
		return r, errors.New("unknown meta record format")
	}
	d := decoder{b: b[1:]}
	r.Ref.Seq = d.uvarint()
	r.gen = d.uvarint()
	r.Kind = lehrpb.NamespaceKind(d.uvarint())
	r.count = d.uvarint()
	r.Ref.Checksum = string(d.bytes())
	info := d.bytes()
	if d.err != nil {
		return r, d.err
	}
	if len(d.b) != 0 {
		return r, fmt.Errorf("%d trailing bytes in meta record", len(d.b))
	}
	if len(info) > 0 {
		r.Info = new(lehrpb.VersionInfo)
		if err := proto.Unmarshal(info, r.Info); err != nil {
			return r, fmt.Errorf("unmarshal version info: %w", err)
		}
	}
	return r, nil
}

// encodeValue is the stored form of a property: content type and value.
func encodeValue(p content.Property) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(p.ContentType)+len(p.Value))
	b = appendBytes(b, []byte(p.ContentType))
	return append(b, p.Value...)
}

func decodeValue(key string, b []byte) (content.Property, error) {
	d := decoder{b: b}
	ct := d.bytes()
	if d.err != nil {
		return content.Property{}, d.err
	}
	return content.Property{Key: key, ContentType: string(ct), Value: d.b}, nil
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}
