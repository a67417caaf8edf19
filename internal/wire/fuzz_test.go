package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"
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
