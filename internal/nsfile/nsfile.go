// Package nsfile is the on-disk file format of one namespace version: the
// file an agent writes for every subscribed namespace and that consumers, in
// Go or any other language, read when it changes. The format is specified
// byte by byte in docs/files.md; in short:
//
//	"LEHR1\n"                     magic, 6 bytes
//	{"namespace":...}\n           header: one line of JSON, at most MaxHeaderBytes
//	body                          body_size bytes: count records, ascending key order
//	    record = uvarint(len(key)) key  uvarint(len(ct)) ct  uvarint(len(value)) value
//	"sha256:<64 hex>\n"           trailer: SHA-256 of every byte before it
//
// The body is exactly the byte stream the canonical content checksum hashes
// after its "lehr-content-v1\n" prefix (see package content), so a reader in
// any language verifies the content with one SHA-256 over prefix and body,
// and the whole file (header included) with one over everything before the
// trailer. Readers in this package check both, recomputing the content
// checksum with package content, and refuse any file whose checksums, sizes,
// names or key order do not match.
//
// Files live at <dir>/<domain>/<name>.lehr (see Path) and are replaced by an
// atomic rename (see Write), so a reader that opens the final name sees the
// previous or the new version, never a mix. Temporary files start with ".".
//
// Imported by agent (to write files), client/consumer (to read them),
// testenv/chaos and bench (to check them). It imports only proto/lehrpb
// and internal packages.
package nsfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Magic is the first line of every file of format version 1. An
// incompatible change to the format changes the magic.
const Magic = "LEHR1\n"

// TrailerLen is the length of the trailer line that ends every file:
// "sha256:", 64 lowercase hex digits of the SHA-256 of every byte before the
// trailer, and "\n".
const TrailerLen = len("sha256:") + 64 + 1

// Ext is the file name extension of namespace files.
const Ext = ".lehr"

// Bounds a reader enforces before allocating anything, so a hostile or
// damaged file cannot make it allocate without limit. They are generous
// multiples of the control plane's limits (16 MiB per namespace, 10,000
// properties, 128-byte content types).
const (
	MaxHeaderBytes      = 64 << 10 // header line, including its "\n"
	MaxBodyBytes        = 64 << 20 // body
	MaxProperties       = 1 << 20  // properties in one file
	MaxContentTypeBytes = 1024     // one content type
)

// File is one version of a namespace as stored in a file.
type File struct {
	// Namespace is "domain/name"; it decides the file's path.
	Namespace string
	// Version is the version's sequence number.
	Version uint64
	// Kind says how the properties are interpreted.
	Kind lehrpb.NamespaceKind
	// Checksum is the canonical checksum of Content ("sha256:" and 64 hex
	// digits). When writing, empty means "compute it"; a non-empty value
	// must equal Content.Checksum() or the write is refused. After a
	// successful read it holds the verified checksum.
	Checksum string
	// Author, Message and CreateTime describe the version; all optional.
	Author     string
	Message    string
	CreateTime time.Time
	// RollbackOf is the older version whose content this version
	// republishes, 0 when it is not a rollback.
	RollbackOf uint64
	// Signature and SignatureKeyID are control's signature of the version
	// (internal/signing) and its key's id; empty when unsigned.
	Signature      []byte
	SignatureKeyID string
	// Content holds the properties.
	Content content.Snapshot
}

// Info returns what f says of its version, in the form control signed it:
// verify it, with f.Kind, with internal/signing's Verifier
// (Verify(f.Info(), f.Kind)).
func (f File) Info() *lehrpb.VersionInfo {
	info := &lehrpb.VersionInfo{Namespace: f.Namespace, Seq: f.Version, Checksum: f.Checksum, Author: f.Author, Message: f.Message,
		RollbackOf: f.RollbackOf, Signature: f.Signature, SignatureKeyId: f.SignatureKeyID}
	if !f.CreateTime.IsZero() {
		info.CreateTime = timestamppb.New(f.CreateTime)
	}
	return info
}

// FromVersion returns the File of version v: the one conversion from the
// in-memory form of a version to its file. Checksum is v's, so writing the
// file verifies that the content matches what control published; author,
// message and creation time come from v.Info.
func FromVersion(v content.Version) File {
	f := File{
		Namespace:  v.Namespace,
		Version:    v.Seq,
		Kind:       v.Kind,
		Checksum:   v.Checksum,
		Author:     v.Info.GetAuthor(),
		Message:    v.Info.GetMessage(),
		RollbackOf: v.Info.GetRollbackOf(),
		Content:    v.Content,

		Signature:      v.Info.GetSignature(),
		SignatureKeyID: v.Info.GetSignatureKeyId(),
	}
	if ts := v.Info.GetCreateTime(); ts != nil {
		f.CreateTime = ts.AsTime()
	}
	return f
}

// header is the JSON header line. Field names are part of the format
// (docs/files.md); readers ignore fields they do not know.
type header struct {
	Namespace  string `json:"namespace"`
	Version    uint64 `json:"version"`
	Kind       string `json:"kind"`
	Checksum   string `json:"checksum"`
	Count      int64  `json:"count"`
	BodySize   int64  `json:"body_size"`
	Author     string `json:"author"`
	Message    string `json:"message"`
	CreateTime string `json:"create_time"`
	// RollbackOf is written only for a rollback: files of other versions
	// stay byte for byte what format version 1 first defined.
	RollbackOf uint64 `json:"rollback_of,omitempty"`
	// Signature (base64) and SignatureKeyID are written only for a signed
	// version, likewise.
	Signature      []byte `json:"signature,omitempty"`
	SignatureKeyID string `json:"signature_key_id,omitempty"`
}

// Kind names in the header.
var kindNames = map[lehrpb.NamespaceKind]string{
	lehrpb.NamespaceKind_NAMESPACE_KIND_UNSPECIFIED: "unspecified",
	lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG:      "config",
	lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY:      "policy",
}

func kindFromName(s string) (lehrpb.NamespaceKind, bool) {
	for k, n := range kindNames {
		if n == s {
			return k, true
		}
	}
	return 0, false
}

// ErrNotLehrFile is returned for input that does not start with Magic.
var ErrNotLehrFile = errors.New("nsfile: not a Lehr namespace file")

// ErrCorrupt is wrapped by every error about a file that starts like a Lehr
// file but is truncated, malformed or fails its checksum. Use errors.As with
// *CorruptError for the details.
var ErrCorrupt = errors.New("nsfile: corrupt namespace file")

// CorruptError describes why a file was refused. It matches ErrCorrupt
// with errors.Is.
type CorruptError struct {
	Path   string // file path when known
	Offset int64  // byte offset where the problem was found
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("%v %s at byte %d: %s", ErrCorrupt, e.Path, e.Offset, e.Reason)
	}
	return fmt.Sprintf("%v at byte %d: %s", ErrCorrupt, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(off int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// check validates f and returns its checksum. Write refuses exactly what
// Decode would refuse.
func (f *File) check() (string, error) {
	if _, _, err := names.Namespace(f.Namespace); err != nil {
		return "", fmt.Errorf("nsfile: namespace: %w", err)
	}
	if _, ok := kindNames[f.Kind]; !ok {
		return "", fmt.Errorf("nsfile: kind %d of %s: want one of config, policy, unspecified", f.Kind, f.Namespace)
	}
	if n := f.Content.Len(); n > MaxProperties {
		return "", fmt.Errorf("nsfile: %s has %d properties, limit %d", f.Namespace, n, MaxProperties)
	}
	for _, p := range f.Content.Props() {
		if err := names.Key(p.Key); err != nil {
			return "", fmt.Errorf("nsfile: %s: %w", f.Namespace, err)
		}
		if len(p.ContentType) > MaxContentTypeBytes {
			return "", fmt.Errorf("nsfile: %s: content type of %q is %d bytes, limit %d",
				f.Namespace, p.Key, len(p.ContentType), MaxContentTypeBytes)
		}
	}
	sum := f.Content.Checksum()
	if f.Checksum != "" && f.Checksum != sum {
		return "", fmt.Errorf("nsfile: %s@%d: content checksum %s does not match the stated checksum %s",
			f.Namespace, f.Version, sum, f.Checksum)
	}
	return sum, nil
}

func bodySize(s content.Snapshot) int64 {
	var n int64
	for _, p := range s.Props() {
		n += int64(uvarintLen(len(p.Key)) + len(p.Key) +
			uvarintLen(len(p.ContentType)) + len(p.ContentType) +
			uvarintLen(len(p.Value)) + len(p.Value))
	}
	return n
}

func uvarintLen(n int) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], uint64(n))
}

// Encode writes f to w in the file format. It validates f first (names,
// kind, sizes, and Checksum when set) and writes nothing if that fails.
func Encode(w io.Writer, f File) error {
	hb, err := f.header()
	if err != nil {
		return err
	}
	return encode(w, f, hb)
}

// header validates f and returns its encoded header line without "\n".
func (f *File) header() ([]byte, error) {
	sum, err := f.check()
	if err != nil {
		return nil, err
	}
	size := bodySize(f.Content)
	if size > MaxBodyBytes {
		return nil, fmt.Errorf("nsfile: %s@%d: body is %d bytes, limit %d", f.Namespace, f.Version, size, MaxBodyBytes)
	}
	h := header{
		Namespace:  f.Namespace,
		Version:    f.Version,
		Kind:       kindNames[f.Kind],
		Checksum:   sum,
		Count:      int64(f.Content.Len()),
		BodySize:   size,
		Author:     f.Author,
		Message:    f.Message,
		RollbackOf: f.RollbackOf,

		Signature:      f.Signature,
		SignatureKeyID: f.SignatureKeyID,
	}
	if !f.CreateTime.IsZero() {
		h.CreateTime = f.CreateTime.UTC().Format(time.RFC3339Nano)
	}
	hb, err := json.Marshal(h) // never contains a raw newline
	if err != nil {
		return nil, fmt.Errorf("nsfile: encode header of %s: %w", f.Namespace, err)
	}
	if len(hb)+1 > MaxHeaderBytes {
		return nil, fmt.Errorf("nsfile: %s@%d: header is %d bytes, limit %d (author or message too long)",
			f.Namespace, f.Version, len(hb)+1, MaxHeaderBytes)
	}
	return hb, nil
}

// encode writes f with its header line hb (from f.header).
func encode(w io.Writer, f File, hb []byte) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	fileSum := sha256.New()
	out := io.MultiWriter(bw, fileSum) // bufio and hash writes never fail
	io.WriteString(out, Magic)
	out.Write(hb)
	out.Write([]byte{'\n'})
	var buf [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		out.Write(buf[:binary.PutUvarint(buf[:], uint64(len(b)))])
		out.Write(b)
	}
	for _, p := range f.Content.Props() {
		field([]byte(p.Key))
		field([]byte(p.ContentType))
		field(p.Value)
	}
	bw.WriteString(trailer(fileSum))
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("nsfile: write %s: %w", f.Namespace, err)
	}
	return nil
}

// Decode reads one file from r and verifies it: magic, header, bounds,
// names, key order, exact body size, the trailer (file checksum) and
// nothing after it, and the content checksum recomputed with package
// content. Errors wrap ErrNotLehrFile,
// ErrCorrupt, or the reader's error.
//
// Property values share one buffer of exactly the body's size, which they
// keep alive: a decoded file holds one copy of its values. Not knowing
// how much r holds, Decode grows that buffer with the input (see
// readBody); ReadOpen, knowing the file's size, allocates it once.
func Decode(r io.Reader) (File, error) { return decode(r, -1) }

// decode is Decode of an input of size bytes, -1 when unknown.
func decode(r io.Reader, size int64) (File, error) {
	br := bufio.NewReaderSize(r, 64<<10)

	magic := make([]byte, len(Magic))
	n, err := io.ReadFull(br, magic)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return File{}, fmt.Errorf("nsfile: read magic: %w", err)
	}
	if !bytes.Equal(magic[:n], []byte(Magic)[:n]) {
		return File{}, fmt.Errorf("%w: first bytes are %q, want %q", ErrNotLehrFile, magic[:n], Magic)
	}
	if n < len(Magic) {
		return File{}, corrupt(int64(n), "truncated in magic")
	}
	off := int64(len(Magic))
	fileSum := sha256.New()
	fileSum.Write(magic)

	line, err := readLine(br, MaxHeaderBytes)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Offset = off
		}
		return File{}, err
	}
	var h header
	if err := json.Unmarshal(line, &h); err != nil {
		return File{}, corrupt(off, "header is not a JSON object: %v", err)
	}
	fileSum.Write(line)
	fileSum.Write([]byte{'\n'})
	off += int64(len(line)) + 1

	f := File{
		Namespace:  h.Namespace,
		Version:    h.Version,
		Checksum:   h.Checksum,
		Author:     h.Author,
		Message:    h.Message,
		RollbackOf: h.RollbackOf,

		Signature:      h.Signature,
		SignatureKeyID: h.SignatureKeyID,
	}
	if _, _, err := names.Namespace(h.Namespace); err != nil {
		return File{}, corrupt(off, "header namespace: %v", err)
	}
	kind, ok := kindFromName(h.Kind)
	if !ok {
		return File{}, corrupt(off, "header kind %q: want config, policy or unspecified", h.Kind)
	}
	f.Kind = kind
	if h.CreateTime != "" {
		t, err := time.Parse(time.RFC3339Nano, h.CreateTime)
		if err != nil {
			return File{}, corrupt(off, "header create_time: %v", err)
		}
		f.CreateTime = t
	}
	if !strings.HasPrefix(h.Checksum, "sha256:") || len(h.Checksum) != len("sha256:")+64 {
		return File{}, corrupt(off, "header checksum %q: want \"sha256:\" and 64 hex digits", h.Checksum)
	}
	if h.BodySize < 0 || h.BodySize > MaxBodyBytes {
		return File{}, corrupt(off, "header body_size %d: want 0 to %d", h.BodySize, MaxBodyBytes)
	}
	// Every record takes at least 4 bytes (three lengths and a key byte).
	if h.Count < 0 || h.Count > MaxProperties || h.Count > h.BodySize/4 {
		return File{}, corrupt(off, "header count %d impossible for body_size %d (limit %d)", h.Count, h.BodySize, MaxProperties)
	}

	avail := int64(-1)
	if size >= 0 {
		avail = size - off
	}
	body, err := readBody(br, h.BodySize, avail)
	if err != nil {
		return File{}, fmt.Errorf("nsfile: read body: %w", err)
	}
	if int64(len(body)) != h.BodySize {
		return File{}, corrupt(off+int64(len(body)), "truncated body: %d of %d bytes", len(body), h.BodySize)
	}
	fileSum.Write(body)
	off += h.BodySize

	// The trailer, then the end of the input.
	tr := make([]byte, TrailerLen+1)
	n, err = io.ReadFull(br, tr)
	switch {
	case err == nil:
		return File{}, corrupt(off+int64(TrailerLen), "data after the trailer")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		if n < TrailerLen {
			return File{}, corrupt(off, "truncated trailer: %d of %d bytes", n, TrailerLen)
		}
	default:
		return File{}, fmt.Errorf("nsfile: read trailer: %w", err)
	}
	if want := trailer(fileSum); string(tr[:n]) != want {
		return File{}, corrupt(off, "file checksum mismatch: trailer %q, bytes before it hash to %q", tr[:n], want[:len(want)-1])
	}
	bodyOff := off - h.BodySize

	props, err := parseBody(body, int(h.Count))
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Offset += bodyOff
		}
		return File{}, err
	}
	snap, err := content.New(props)
	if err != nil { // cannot happen after the order check; kept as a guard
		return File{}, corrupt(bodyOff, "%v", err)
	}
	if sum := snap.Checksum(); sum != h.Checksum {
		return File{}, corrupt(bodyOff, "checksum mismatch: content hashes to %s, header says %s", sum, h.Checksum)
	}
	f.Content = snap
	return f, nil
}

// readBody reads the n-byte body from r into a buffer of exactly n
// bytes: the one copy of the data, which the decoded values share and keep
// alive (a buffer with spare capacity would be kept alive with them).
// When r is known to hold at least n more bytes (avail, from a file's
// size; -1 when unknown) the buffer is allocated at once. Otherwise it
// grows with the input rather than trusting n, so a short input with a
// large claim costs little: from 1 MiB, doubling but never beyond n
// (less than 2n held at once, 3n allocated in all). A short input returns
// what it held, without error.
func readBody(r io.Reader, n, avail int64) ([]byte, error) {
	size := n
	if avail < n {
		size = min(n, 1<<20)
	}
	buf := make([]byte, size)
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return buf[:got], nil
		case err != nil:
			return nil, err
		case int64(got) == n:
			return buf, nil
		}
		grown := make([]byte, min(2*int64(len(buf)), n))
		copy(grown, buf)
		buf = grown
	}
}

func trailer(h hash.Hash) string {
	return "sha256:" + hex.EncodeToString(h.Sum(nil)) + "\n"
}

// parseBody splits body into count properties; offsets in errors are
// relative to the body.
func parseBody(body []byte, count int) ([]content.Property, error) {
	props := make([]content.Property, 0, count)
	pos := 0
	field := func(what string, limit int) ([]byte, error) {
		l, n := binary.Uvarint(body[pos:])
		if n <= 0 {
			return nil, corrupt(int64(pos), "bad or truncated length of %s", what)
		}
		if l > uint64(limit) || l > uint64(len(body)-pos-n) {
			return nil, corrupt(int64(pos), "%s length %d exceeds limit %d or the remaining %d body bytes",
				what, l, limit, len(body)-pos-n)
		}
		pos += n
		b := body[pos : pos+int(l) : pos+int(l)]
		pos += int(l)
		return b, nil
	}
	prev, prevCT := "", ""
	for i := range count {
		start := pos
		k, err := field("key", names.MaxKeyLen)
		if err != nil {
			return nil, err
		}
		key := string(k)
		if err := names.Key(key); err != nil {
			return nil, corrupt(int64(start), "property %d: %v", i, err)
		}
		if i > 0 && key <= prev {
			return nil, corrupt(int64(start), "property %d: key %q not after %q (keys must be unique and ascending)", i, key, prev)
		}
		ct, err := field("content type", MaxContentTypeBytes)
		if err != nil {
			return nil, err
		}
		v, err := field("value", MaxBodyBytes)
		if err != nil {
			return nil, err
		}
		if string(ct) != prevCT { // most properties share their neighbour's type: one string for all
			prevCT = string(ct)
		}
		props = append(props, content.Property{Key: key, ContentType: prevCT, Value: v})
		prev = key
	}
	if pos != len(body) {
		return nil, corrupt(int64(pos), "%d bytes left in the body after %d properties", len(body)-pos, count)
	}
	return props, nil
}

// readLine reads up to and excluding "\n", at most limit bytes including it.
// Corrupt errors carry offset 0; the caller fills it in.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, corrupt(0, "header line longer than %d bytes", limit)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, corrupt(0, "truncated header (no newline)")
		default:
			return nil, fmt.Errorf("nsfile: read header: %w", err)
		}
	}
}
