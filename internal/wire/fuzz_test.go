package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sort"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// FuzzReadFrame: arbitrary bytes never make the decoder panic; every error
// is a *FrameError or io.EOF; a frame that decodes re-encodes to a frame
// that decodes to an equal message, and re-encoding is stable. The stream
// state machines are driven with the same bytes.
func FuzzReadFrame(f *testing.F) {
	var all []byte
	for ft := FrameType(1); ft <= maxFrameType; ft++ {
		var buf bytes.Buffer
		if err := WriteFrame(&buf, sampleMessages()[ft]); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
		all = append(all, buf.Bytes()...)
	}
	f.Add(all)
	f.Add([]byte{})
	f.Add([]byte{byte(FramePing), 0})
	f.Add([]byte{byte(FramePing), 0x80, 0x00})
	f.Add([]byte{0xee, 0x01, 0x00})
	f.Add([]byte{byte(FrameHello), 0x03, 0xff, 0xff, 0xff})
	f.Add(binary.AppendUvarint([]byte{byte(FrameUpdate)}, 1<<40))
	f.Add(append([]byte{byte(FramePing)}, bytes.Repeat([]byte{0xff}, 10)...))

	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := ReadFrame(bytes.NewReader(data), 0)
		checkDecodeErr(t, err)
		if err == nil {
			var b1 bytes.Buffer
			if err := WriteFrame(&b1, msg); err != nil {
				t.Fatalf("re-encoding a decoded %T: %v", msg, err)
			}
			msg2, err := ReadFrame(bytes.NewReader(b1.Bytes()), 0)
			if err != nil {
				t.Fatalf("decoding the re-encoded frame: %v", err)
			}
			if !proto.Equal(msg, msg2) {
				t.Fatalf("re-encoded frame decodes to a different message:\n%v\n%v", msg, msg2)
			}
			var b2 bytes.Buffer
			if err := WriteFrame(&b2, msg2); err != nil || !bytes.Equal(b1.Bytes(), b2.Bytes()) {
				t.Fatalf("encoding is not stable (err %v)", err)
			}
		}
		for s := StreamAny; s <= StreamUpdate; s++ {
			d := NewDecoder(bytes.NewReader(data), DecoderOptions{Stream: s, Limits: Limits{MaxControlFrame: 4096, MaxUpdateFrame: 1 << 16}})
			for i := 0; ; i++ {
				if _, err := d.Decode(); err != nil {
					checkDecodeErr(t, err)
					break
				}
				if i > len(data) {
					t.Fatalf("%v: more frames than bytes", s)
				}
			}
		}
	})
}

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	var fe *FrameError
	if err != nil && err != io.EOF && !errors.As(err, &fe) {
		t.Fatalf("error is neither io.EOF nor *FrameError: %T %v", err, err)
	}
	if fe != nil && (fe.Code < ErrUnknownType || fe.Code > ErrUnexpected) {
		t.Fatalf("FrameError with code %d", fe.Code)
	}
}

// FuzzApplyUpdate: arbitrary Update bytes applied to a fixed base never
// panic, never modify the base, fail only with the documented errors, and
// succeed only with the promised checksum. An update that failed only on
// its checksum is retried with the checksum of an independent, map-based
// application and must then succeed with exactly that content.
func FuzzApplyUpdate(f *testing.F) {
	base := mustSnap(prop("a", "1"), prop("b", "2"), content.Property{Key: "c/d", ContentType: "application/json", Value: []byte(`{"x":1}`)})
	const baseVersion = 4
	baseSum := base.Checksum()

	add := func(u *lehrpb.Update) {
		b, err := proto.Marshal(u)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	next := mustSnap(prop("a", "1"), prop("b", "20"), prop("e", "5"), content.Property{Key: "c/d", ContentType: "application/json", Value: []byte(`{"x":1}`)})
	p, err := BuildUpdate("demo/a", lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, &Version{Seq: baseVersion, Content: base}, Version{Seq: 5, Content: next})
	if err != nil {
		f.Fatal(err)
	}
	add(p)
	s, err := BuildUpdate("demo/a", lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, nil, Version{Seq: 9, Content: next})
	if err != nil {
		f.Fatal(err)
	}
	add(s)
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: baseVersion, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty, Delete: []string{"a", "b", "c/d"}})
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: baseVersion, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty, Delete: []string{"zz"}})
	add(&lehrpb.Update{Namespace: "demo/a", BaseVersion: 3, BaseChecksum: baseSum, Version: 5, Checksum: sumEmpty})
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		u := new(lehrpb.Update)
		if err := proto.Unmarshal(data, u); err != nil {
			return
		}
		got, err := ApplyUpdate(base, baseVersion, baseSum, u)
		checkApply(t, u, got, err)
		if base.Checksum() != baseSum {
			t.Fatal("ApplyUpdate modified the base")
		}
		if !errors.Is(err, ErrChecksumMismatch) {
			return
		}
		want := referenceApply(base, u)
		u.Checksum = want.Checksum()
		got, err = ApplyUpdate(base, baseVersion, baseSum, u)
		if err != nil {
			t.Fatalf("with the reference checksum: %v", err)
		}
		if !got.Equal(want) {
			t.Fatalf("ApplyUpdate = %v, reference = %v", got.Keys(), want.Keys())
		}
	})
}

func checkApply(t *testing.T, u *lehrpb.Update, got content.Snapshot, err error) {
	t.Helper()
	switch {
	case err == nil:
		if got.Checksum() != u.GetChecksum() {
			t.Fatalf("success with checksum %s, update says %s", got.Checksum(), u.GetChecksum())
		}
		if !u.GetSnapshot() && (u.GetBaseVersion() != 4) {
			t.Fatalf("patch for base %d applied to base 4", u.GetBaseVersion())
		}
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrBaseMismatch),
		errors.Is(err, ErrPatchConflict), errors.Is(err, ErrChecksumMismatch):
	default:
		t.Fatalf("undocumented error: %v", err)
	}
}

// referenceApply applies a valid update with a map, independently of
// content.Apply.
func referenceApply(base content.Snapshot, u *lehrpb.Update) content.Snapshot {
	m := map[string]content.Property{}
	if !u.GetSnapshot() {
		for _, p := range base.Props() {
			m[p.Key] = p
		}
	}
	for _, k := range u.GetDelete() {
		delete(m, k)
	}
	for _, p := range content.FromProto(u.GetSet()) {
		m[p.Key] = p
	}
	props := make([]content.Property, 0, len(m))
	for _, p := range m {
		props = append(props, p)
	}
	sort.Slice(props, func(i, j int) bool { return props[i].Key < props[j].Key })
	s, err := content.New(props)
	if err != nil {
		panic(err)
	}
	return s
}
