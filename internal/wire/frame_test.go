package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

var (
	sumEmpty = content.Snapshot{}.Checksum()
	sumA     = mustSnap(content.Property{Key: "a", Value: []byte("1")}).Checksum()
)

func mustSnap(props ...content.Property) content.Snapshot {
	s, err := content.New(props)
	if err != nil {
		panic(err)
	}
	return s
}

// sampleMessages has one valid, well-filled message of every frame type.
func sampleMessages() map[FrameType]proto.Message {
	return map[FrameType]proto.Message{
		FrameHello: &lehrpb.Hello{
			ProtocolVersion: 1, MinProtocolVersion: 1, HostId: "host-1.example", Zone: "zone-a",
			Labels:        map[string]string{"role": "canary", "rack": "r7"},
			Cached:        []*lehrpb.CachedNamespace{{Namespace: "demo/a", Version: 3, Checksum: sumA}, {Namespace: "demo/b"}},
			Subscriptions: []string{"demo/a", "demo/c"},
			AgentVersion:  "lehr-agent v0.1.0", Capabilities: []string{"future-thing"},
		},
		FrameWelcome: &lehrpb.Welcome{
			ProtocolVersion: 1, DistributorId: "dist-1", Zone: "zone-a", Capabilities: []string{},
			DistributorVersion: "v0.1.0", ReportInterval: durationpb.New(30 * time.Second), MaxUpdateBytes: 64 << 20,
			RedialSpread: durationpb.New(12 * time.Second),
		},
		FrameSubscribe:   &lehrpb.Subscribe{Namespaces: []*lehrpb.CachedNamespace{{Namespace: "demo/c"}, {Namespace: "demo/d", Version: 9, Checksum: sumEmpty}}},
		FrameUnsubscribe: &lehrpb.Unsubscribe{Namespaces: []string{"demo/c"}},
		FrameUpdate: &lehrpb.Update{
			Namespace: "demo/a", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, BaseVersion: 3, BaseChecksum: sumA,
			Version: 4, Checksum: sumEmpty,
			Info:   &lehrpb.VersionInfo{Namespace: "demo/a", Seq: 4, Author: "alice", Message: "tune", CreateTime: timestamppb.New(time.Unix(1700000000, 5))},
			Set:    []*lehrpb.Property{{Key: "b", Value: []byte("2"), ContentType: "text/plain"}},
			Delete: []string{"a"},
		},
		FrameAck:            &lehrpb.Ack{Namespace: "demo/a", Version: 4, Checksum: sumEmpty, Ok: true},
		FrameResync:         &lehrpb.Resync{Namespace: "demo/a", HaveVersion: 3, HaveChecksum: sumA, Reason: lehrpb.ResyncReason_RESYNC_REASON_CHECKSUM_MISMATCH, Detail: "x"},
		FrameReport:         &lehrpb.Report{Time: timestamppb.New(time.Unix(1700000000, 0)), Namespaces: []*lehrpb.NamespaceReport{{Namespace: "demo/a", Version: 4, Checksum: sumEmpty, Clients: 2, ClientsApplied: 1, ApplyErrors: 3}}},
		FrameGoodbye:        &lehrpb.Goodbye{Code: uint64(CodeShuttingDown), Reason: "draining", RetryAfter: durationpb.New(time.Minute)},
		FramePing:           &lehrpb.Ping{Nonce: 42},
		FramePong:           &lehrpb.Pong{Nonce: 42},
		FrameUnavailable:    &lehrpb.Unavailable{Namespace: "demo/z", Reason: lehrpb.UnavailableReason_UNAVAILABLE_REASON_NOT_FOUND, Detail: "no goal state in zone-a"},
		FrameSignalsRequest: &lehrpb.SignalsRequest{Namespaces: []*lehrpb.SignalsWanted{{Namespace: "demo/a", Since: 1700000000}}},
		FrameSignals: &lehrpb.Signals{Namespaces: []*lehrpb.NamespaceSignals{{
			Namespace: "demo/a", IntervalSeconds: 10, First: 1700000000, Versions: []uint64{3, 4},
			Series: []*lehrpb.SignalSeries{{Name: "requests", Values: []float64{1000, 990}}, {Name: "request_errors", Values: []float64{1, 12}}},
		}}},
		FrameAdvice: &lehrpb.Advice{RedialSpread: durationpb.New(20 * time.Second)},
	}
}

func TestRoundTripEveryType(t *testing.T) {
	msgs := sampleMessages()
	for ft := FrameType(1); ft <= maxFrameType; ft++ {
		msg, ok := msgs[ft]
		if !ok {
			t.Fatalf("no sample message for %v", ft)
		}
		t.Run(ft.String(), func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFrame(&buf, msg); err != nil {
				t.Fatalf("WriteFrame: %v", err)
			}
			raw := buf.Bytes()
			if got := FrameType(raw[0]); got != ft {
				t.Errorf("type byte = %v, want %v", got, ft)
			}
			n, hl := binary.Uvarint(raw[1:])
			if hl <= 0 || int(n) != len(raw)-1-hl {
				t.Errorf("length = %d (header %d bytes), want payload length %d", n, hl, len(raw)-1-hl)
			}
			// Both reader shapes: unbuffered (byte at a time) and bufio.
			for name, r := range map[string]io.Reader{
				"plain": iotest.OneByteReader(bytes.NewReader(raw)),
				"bufio": bufio.NewReader(bytes.NewReader(raw)),
			} {
				got, err := ReadFrame(r, 0)
				if err != nil {
					t.Fatalf("ReadFrame(%s): %v", name, err)
				}
				if diff := cmp.Diff(msg, got, protocmp.Transform()); diff != "" {
					t.Errorf("ReadFrame(%s) mismatch (-want +got):\n%s", name, diff)
				}
				if _, err := ReadFrame(r, 0); err != io.EOF {
					t.Errorf("ReadFrame(%s) after the frame = %v, want io.EOF", name, err)
				}
			}
			// Deterministic encoding.
			var again bytes.Buffer
			if err := WriteFrame(&again, msg); err != nil || !bytes.Equal(again.Bytes(), raw) {
				t.Errorf("second encoding differs (err %v)", err)
			}
		})
	}
}

func TestDecoderManyFrames(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf, Limits{})
	var want []proto.Message
	for ft := FrameType(1); ft <= maxFrameType; ft++ {
		m := sampleMessages()[ft]
		if err := enc.Encode(m); err != nil {
			t.Fatalf("Encode(%v): %v", ft, err)
		}
		want = append(want, m)
	}
	d := NewDecoder(&buf, DecoderOptions{})
	var got []proto.Message
	for {
		m, err := d.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		got = append(got, m)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("decoded frames mismatch (-want +got):\n%s", diff)
	}
}

// frame builds raw frame bytes without validation.
func frame(t FrameType, payload []byte) []byte {
	b := []byte{byte(t)}
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func TestReadFrameErrors(t *testing.T) {
	hello := mustMarshal(sampleMessages()[FrameHello])
	validHello := frame(FrameHello, hello)
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    FrameErrorCode // 0: want io.EOF
		typ     FrameType
		reason  string // substring of the error
		isUnEOF bool   // errors.Is(err, io.ErrUnexpectedEOF)
	}{
		{name: "empty input", in: nil},
		{name: "unknown type 0", in: []byte{0, 0}, want: ErrUnknownType, reason: "type byte 0x00"},
		{name: "unknown type 200", in: frame(200, []byte{1, 2}), want: ErrUnknownType, typ: 200},
		{name: "type only", in: []byte{byte(FramePing)}, want: ErrTruncated, typ: FramePing, isUnEOF: true},
		{name: "length cut", in: []byte{byte(FramePing), 0x80}, want: ErrTruncated, typ: FramePing, isUnEOF: true},
		{name: "payload cut", in: validHello[:len(validHello)-3], want: ErrTruncated, typ: FrameHello, isUnEOF: true},
		{name: "non-minimal length", in: []byte{byte(FramePing), 0x80, 0x00}, want: ErrMalformed, reason: "shortest"},
		{name: "length overflow", in: append([]byte{byte(FramePing)}, bytes.Repeat([]byte{0xff}, 10)...), want: ErrMalformed, reason: "overflows"},
		{name: "length too long", in: append([]byte{byte(FramePing)}, bytes.Repeat([]byte{0x80}, 11)...), want: ErrMalformed, reason: "overflows"},
		{name: "oversize control frame", in: binary.AppendUvarint([]byte{byte(FrameHello)}, DefaultMaxControlFrame+1), want: ErrFrameTooLarge, typ: FrameHello},
		{name: "oversize update frame", in: binary.AppendUvarint([]byte{byte(FrameUpdate)}, DefaultMaxUpdateFrame+1), want: ErrFrameTooLarge, typ: FrameUpdate},
		{name: "huge declared length", in: binary.AppendUvarint([]byte{byte(FrameUpdate)}, 1<<62), want: ErrFrameTooLarge},
		{name: "over explicit max", in: validHello, max: 10, want: ErrFrameTooLarge, reason: "limit of 10"},
		{name: "garbage payload", in: frame(FrameHello, []byte{0xff, 0xff, 0xff}), want: ErrMalformed, reason: "protobuf"},
		{name: "field without value", in: frame(FramePing, []byte{0x08}), want: ErrMalformed, reason: "protobuf"},
		{name: "invalid utf8 string", in: frame(FrameAck, []byte{0x0a, 0x02, 0xc3, 0x28}), want: ErrMalformed},
		{name: "zero-length Hello", in: frame(FrameHello, nil), want: ErrMalformed, reason: "protocol_version"},
		{name: "zero-length Update", in: frame(FrameUpdate, nil), want: ErrMalformed, reason: "namespace"},
		{name: "zero-length Subscribe", in: frame(FrameSubscribe, nil), want: ErrMalformed, reason: "namespaces"},
		{name: "Hello without host", in: frame(FrameHello, mustMarshal(&lehrpb.Hello{ProtocolVersion: 1, Zone: "z"})), want: ErrMalformed, reason: "host_id"},
		{name: "Ack with bad checksum", in: frame(FrameAck, mustMarshal(&lehrpb.Ack{Namespace: "d/n", Version: 1, Ok: true, Checksum: "md5:x"})), want: ErrMalformed, reason: "field checksum"},
		{name: "Subscribe bad namespace", in: frame(FrameSubscribe, mustMarshal(&lehrpb.Subscribe{Namespaces: []*lehrpb.CachedNamespace{{Namespace: "NoSlash"}}})), want: ErrMalformed, reason: "namespaces[0].namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tc.in), tc.max)
			if tc.want == 0 {
				if err != io.EOF {
					t.Fatalf("ReadFrame = %v, %v; want io.EOF", got, err)
				}
				return
			}
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("ReadFrame = %v, %v; want *FrameError %v", got, err, tc.want)
			}
			if fe.Code != tc.want || !errors.Is(err, tc.want) {
				t.Errorf("code = %v, want %v (err %v)", fe.Code, tc.want, err)
			}
			if tc.typ != 0 && fe.Type != tc.typ {
				t.Errorf("type = %v, want %v", fe.Type, tc.typ)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not mention %q", err, tc.reason)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.isUnEOF {
				t.Errorf("errors.Is(err, io.ErrUnexpectedEOF) = %v, want %v", got, tc.isUnEOF)
			}
		})
	}
}

func TestReadFrameZeroLengthPing(t *testing.T) {
	// An all-default message is a valid, empty payload.
	got, err := ReadFrame(bytes.NewReader([]byte{byte(FramePing), 0}), 0)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if diff := cmp.Diff(&lehrpb.Ping{}, got, protocmp.Transform()); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestReadFrameIOErrorsPassThrough(t *testing.T) {
	boom := errors.New("boom")
	raw := frame(FramePing, mustMarshal(&lehrpb.Ping{Nonce: 7}))
	for cut := 0; cut < len(raw); cut++ {
		r := io.MultiReader(bytes.NewReader(raw[:cut]), iotest.ErrReader(boom))
		_, err := ReadFrame(r, 0)
		if !errors.Is(err, boom) {
			t.Errorf("cut at %d: err = %v, want wrapping %v", cut, err, boom)
		}
		var fe *FrameError
		if errors.As(err, &fe) {
			t.Errorf("cut at %d: an I/O error became a FrameError: %v", cut, err)
		}
	}
}

func TestLargeUpdateGrowsBuffer(t *testing.T) {
	// 3 MiB: above the up-front allocation, read in growing chunks.
	big := bytes.Repeat([]byte("x"), 3<<20)
	snap := mustSnap(content.Property{Key: "big", Value: big})
	u := &lehrpb.Update{Namespace: "demo/big", Snapshot: true, Version: 1, Checksum: snap.Checksum(), Set: content.ToProto(snap.Props())}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, u); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	raw := buf.Bytes()
	got, err := ReadFrame(iotest.HalfReader(bytes.NewReader(raw)), 0)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if !proto.Equal(got, u) {
		t.Errorf("big update did not round-trip")
	}
	_, err = ReadFrame(bytes.NewReader(raw[:len(raw)-1]), 0)
	if !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated big update: err = %v, want ErrTruncated", err)
	}
}

func TestEncoderRefuses(t *testing.T) {
	big := &lehrpb.Update{Namespace: "demo/a", Snapshot: true, Version: 1, Checksum: sumEmpty,
		Set: []*lehrpb.Property{{Key: "k", Value: make([]byte, 2000)}}}
	tests := []struct {
		name string
		msg  proto.Message
		lim  Limits
		want FrameErrorCode
	}{
		{"not a wire message", &lehrpb.Zone{Name: "z"}, Limits{}, ErrUnknownType},
		{"nil hello", (*lehrpb.Hello)(nil), Limits{}, ErrMalformed},
		{"invalid hello", &lehrpb.Hello{ProtocolVersion: 1}, Limits{}, ErrMalformed},
		{"over update limit", big, Limits{MaxUpdateFrame: 1000}, ErrFrameTooLarge},
		{"control limit does not apply to update", big, Limits{MaxControlFrame: 1000}, 0},
		{"over control limit", &lehrpb.Unavailable{Namespace: "demo/a", Detail: strings.Repeat("x", 2000)}, Limits{MaxControlFrame: 1000}, ErrFrameTooLarge},
		{"negative redial spread", &lehrpb.Advice{RedialSpread: durationpb.New(-time.Second)}, Limits{}, ErrMalformed},
		{"redial spread over its bound", &lehrpb.Advice{RedialSpread: durationpb.New(MaxRedialSpread + time.Second)}, Limits{}, ErrMalformed},
		{"welcome with a negative redial spread", &lehrpb.Welcome{ProtocolVersion: 1, Zone: "zone-a", RedialSpread: durationpb.New(-time.Second)}, Limits{}, ErrMalformed},
		{"no redial spread", &lehrpb.Advice{}, Limits{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := NewEncoder(&buf, tc.lim).Encode(tc.msg)
			if tc.want == 0 {
				if err != nil {
					t.Fatalf("Encode = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Encode = %v, want %v", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Errorf("Encode wrote %d bytes despite the error", buf.Len())
			}
		})
	}
}

func TestDecoderStreamRules(t *testing.T) {
	m := sampleMessages()
	tests := []struct {
		name   string
		stream Stream
		frames []FrameType
		// okCount frames decode, then the next gives wantErr (0: io.EOF).
		okCount int
		wantErr FrameErrorCode
	}{
		{"agent control: full session", StreamControlFromAgent, []FrameType{FrameHello, FrameSubscribe, FrameAck, FrameResync, FrameReport, FrameSignals, FramePing, FramePong, FrameUnsubscribe, FrameGoodbye}, 10, 0},
		{"agent control: SignalsRequest not allowed", StreamControlFromAgent, []FrameType{FrameHello, FrameSignalsRequest}, 1, ErrUnexpected},
		{"agent control: must start with Hello", StreamControlFromAgent, []FrameType{FrameSubscribe}, 0, ErrUnexpected},
		{"agent control: second Hello", StreamControlFromAgent, []FrameType{FrameHello, FrameHello}, 1, ErrUnexpected},
		{"agent control: Update not allowed", StreamControlFromAgent, []FrameType{FrameHello, FrameUpdate}, 1, ErrUnexpected},
		{"agent control: Welcome not allowed", StreamControlFromAgent, []FrameType{FrameHello, FrameWelcome}, 1, ErrUnexpected},
		{"agent control: nothing after Goodbye", StreamControlFromAgent, []FrameType{FrameHello, FrameGoodbye, FramePing}, 2, ErrUnexpected},
		{"distributor control: full session", StreamControlFromDistributor, []FrameType{FrameWelcome, FrameUnavailable, FrameSignalsRequest, FramePing, FramePong, FrameGoodbye}, 6, 0},
		{"distributor control: Signals not allowed", StreamControlFromDistributor, []FrameType{FrameWelcome, FrameSignals}, 1, ErrUnexpected},
		{"distributor control: refused", StreamControlFromDistributor, []FrameType{FrameGoodbye}, 1, 0},
		{"distributor control: must start with Welcome", StreamControlFromDistributor, []FrameType{FrameUnavailable}, 0, ErrUnexpected},
		{"distributor control: Ack not allowed", StreamControlFromDistributor, []FrameType{FrameWelcome, FrameAck}, 1, ErrUnexpected},
		{"update stream: one Update", StreamUpdate, []FrameType{FrameUpdate}, 1, 0},
		{"update stream: two Updates", StreamUpdate, []FrameType{FrameUpdate, FrameUpdate}, 1, ErrUnexpected},
		{"update stream: not an Update", StreamUpdate, []FrameType{FramePing}, 0, ErrUnexpected},
		{"update stream: empty", StreamUpdate, nil, 0, ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			for _, ft := range tc.frames {
				if err := WriteFrame(&buf, m[ft]); err != nil {
					t.Fatal(err)
				}
			}
			d := NewDecoder(&buf, DecoderOptions{Stream: tc.stream})
			for i := 0; i < tc.okCount; i++ {
				if _, err := d.Decode(); err != nil {
					t.Fatalf("frame %d (%v): %v", i, tc.frames[i], err)
				}
			}
			_, err := d.Decode()
			if tc.wantErr == 0 {
				if err != io.EOF {
					t.Fatalf("after %d frames: err = %v, want io.EOF", tc.okCount, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("after %d frames: err = %v, want %v", tc.okCount, err, tc.wantErr)
			}
		})
	}
}

func TestUnexpectedFrameRefusedBeforePayload(t *testing.T) {
	// An Update header on the control stream is refused without reading
	// (or allocating for) its declared 60 MiB payload.
	in := binary.AppendUvarint([]byte{byte(FrameUpdate)}, 60<<20)
	var buf bytes.Buffer
	if err := WriteFrame(&buf, sampleMessages()[FrameHello]); err != nil {
		t.Fatal(err)
	}
	buf.Write(in)
	d := NewDecoder(&buf, DecoderOptions{Stream: StreamControlFromAgent})
	if _, err := d.Decode(); err != nil {
		t.Fatal(err)
	}
	_, err := d.Decode()
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Code != ErrUnexpected || fe.Type != FrameUpdate {
		t.Fatalf("err = %v, want ErrUnexpected for Update", err)
	}
}

func TestCodeFor(t *testing.T) {
	tests := []struct {
		err  error
		want uint64
	}{
		{nil, uint64(CodeNoError)},
		{&FrameError{Code: ErrMalformed}, uint64(CodeProtocolViolation)},
		{&FrameError{Code: ErrUnexpected}, uint64(CodeProtocolViolation)},
		{&FrameError{Code: ErrFrameTooLarge}, uint64(CodeFrameTooLarge)},
		{errors.Join(errors.New("x"), &FrameError{Code: ErrUnknownType}), uint64(CodeProtocolViolation)},
		{ErrUnsupportedVersion, uint64(CodeUnsupportedVersion)},
		{&GoodbyeError{Code: CodeShuttingDown}, uint64(CodeShuttingDown)},
		{io.ErrClosedPipe, uint64(CodeInternalError)},
	}
	for _, tc := range tests {
		if got := uint64(CodeFor(tc.err)); got != tc.want {
			t.Errorf("CodeFor(%v) = %#x, want %#x", tc.err, got, tc.want)
		}
	}
	for c := CodeNoError; c <= CodeReplaced; c++ {
		if strings.HasPrefix(CodeName(c), "unknown") {
			t.Errorf("code %#x has no name", uint64(c))
		}
	}
}
