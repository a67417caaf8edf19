package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// FrameType is the first byte of a frame: which message the payload holds.
// Values are part of the protocol: never renumber or reuse one.
type FrameType uint8

// Frame types of protocol version 1.
const (
	FrameHello       FrameType = 1  // lehrpb.Hello, agent → distributor
	FrameWelcome     FrameType = 2  // lehrpb.Welcome, distributor → agent
	FrameSubscribe   FrameType = 3  // lehrpb.Subscribe, agent → distributor
	FrameUnsubscribe FrameType = 4  // lehrpb.Unsubscribe, agent → distributor
	FrameUpdate      FrameType = 5  // lehrpb.Update, distributor → agent, own stream
	FrameAck         FrameType = 6  // lehrpb.Ack, agent → distributor
	FrameResync      FrameType = 7  // lehrpb.Resync, agent → distributor
	FrameReport      FrameType = 8  // lehrpb.Report, agent → distributor
	FrameGoodbye     FrameType = 9  // lehrpb.Goodbye, either way
	FramePing        FrameType = 10 // lehrpb.Ping, either way
	FramePong        FrameType = 11 // lehrpb.Pong, either way
	FrameUnavailable FrameType = 12 // lehrpb.Unavailable, distributor → agent
	// The next two only on a connection that negotiated CapSignals.
	FrameSignalsRequest FrameType = 13 // lehrpb.SignalsRequest, distributor → agent
	FrameSignals        FrameType = 14 // lehrpb.Signals, agent → distributor
	// Only on a connection that negotiated CapRedialSpread.
	FrameAdvice FrameType = 15 // lehrpb.Advice, distributor → agent
)

// maxFrameType is the highest known FrameType.
const maxFrameType = FrameAdvice

var frameTypeNames = [...]string{
	FrameHello:       "Hello",
	FrameWelcome:     "Welcome",
	FrameSubscribe:   "Subscribe",
	FrameUnsubscribe: "Unsubscribe",
	FrameUpdate:      "Update",
	FrameAck:         "Ack",
	FrameResync:      "Resync",
	FrameReport:      "Report",
	FrameGoodbye:     "Goodbye",
	FramePing:        "Ping",
	FramePong:        "Pong",
	FrameUnavailable: "Unavailable",

	FrameSignalsRequest: "SignalsRequest",
	FrameSignals:        "Signals",
	FrameAdvice:         "Advice",
}

// Known reports whether t is a frame type of this protocol version.
func (t FrameType) Known() bool { return t >= 1 && t <= maxFrameType }

// String returns the message name, or "type 0xNN" for an unknown type.
func (t FrameType) String() string {
	if t.Known() {
		return frameTypeNames[t]
	}
	return fmt.Sprintf("type %#02x", uint8(t))
}

// newMessage returns an empty message for a known frame type.
func newMessage(t FrameType) proto.Message {
	switch t {
	case FrameHello:
		return new(lehrpb.Hello)
	case FrameWelcome:
		return new(lehrpb.Welcome)
	case FrameSubscribe:
		return new(lehrpb.Subscribe)
	case FrameUnsubscribe:
		return new(lehrpb.Unsubscribe)
	case FrameUpdate:
		return new(lehrpb.Update)
	case FrameAck:
		return new(lehrpb.Ack)
	case FrameResync:
		return new(lehrpb.Resync)
	case FrameReport:
		return new(lehrpb.Report)
	case FrameGoodbye:
		return new(lehrpb.Goodbye)
	case FramePing:
		return new(lehrpb.Ping)
	case FramePong:
		return new(lehrpb.Pong)
	case FrameUnavailable:
		return new(lehrpb.Unavailable)
	case FrameSignalsRequest:
		return new(lehrpb.SignalsRequest)
	case FrameSignals:
		return new(lehrpb.Signals)
	case FrameAdvice:
		return new(lehrpb.Advice)
	}
	return nil
}

// TypeOf returns the frame type that carries msg, or 0 and false if msg is
// not a wire message.
func TypeOf(msg proto.Message) (FrameType, bool) {
	switch msg.(type) {
	case *lehrpb.Hello:
		return FrameHello, true
	case *lehrpb.Welcome:
		return FrameWelcome, true
	case *lehrpb.Subscribe:
		return FrameSubscribe, true
	case *lehrpb.Unsubscribe:
		return FrameUnsubscribe, true
	case *lehrpb.Update:
		return FrameUpdate, true
	case *lehrpb.Ack:
		return FrameAck, true
	case *lehrpb.Resync:
		return FrameResync, true
	case *lehrpb.Report:
		return FrameReport, true
	case *lehrpb.Goodbye:
		return FrameGoodbye, true
	case *lehrpb.Ping:
		return FramePing, true
	case *lehrpb.Pong:
		return FramePong, true
	case *lehrpb.Unavailable:
		return FrameUnavailable, true
	case *lehrpb.SignalsRequest:
		return FrameSignalsRequest, true
	case *lehrpb.Signals:
		return FrameSignals, true
	case *lehrpb.Advice:
		return FrameAdvice, true
	}
	return 0, false
}

// Default frame payload limits.
const (
	// DefaultMaxControlFrame bounds the payload of every frame but Update.
	DefaultMaxControlFrame = 1 << 20 // 1 MiB
	// DefaultMaxUpdateFrame bounds the payload of an Update frame, and so
	// the largest namespace version that can be sent as a snapshot.
	DefaultMaxUpdateFrame = 64 << 20 // 64 MiB
	// MaxHeaderLen is the longest frame header: one type byte and a 10-byte
	// uvarint.
	MaxHeaderLen = 1 + binary.MaxVarintLen64
)

// Limits bounds frame payload sizes. The zero value means the defaults.
// Both sides should use the same limits; the distributor announces its
// Update limit in Welcome.max_update_bytes.
type Limits struct {
	// MaxControlFrame is the largest payload of any frame but Update.
	// Zero means DefaultMaxControlFrame.
	MaxControlFrame int
	// MaxUpdateFrame is the largest payload of an Update frame. Zero means
	// DefaultMaxUpdateFrame.
	MaxUpdateFrame int
}

// For returns the payload limit for frames of type t.
func (l Limits) For(t FrameType) int {
	if t == FrameUpdate {
		if l.MaxUpdateFrame > 0 {
			return l.MaxUpdateFrame
		}
		return DefaultMaxUpdateFrame
	}
	if l.MaxControlFrame > 0 {
		return l.MaxControlFrame
	}
	return DefaultMaxControlFrame
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// AppendFrame validates msg, checks its size against lim and appends its
// frame to b. Encoding is deterministic: the same message always gives the
// same bytes.
func AppendFrame(b []byte, msg proto.Message, lim Limits) ([]byte, error) {
	t, ok := TypeOf(msg)
	if !ok {
		return b, &FrameError{Code: ErrUnknownType, Reason: fmt.Sprintf("%T is not a wire message", msg)}
	}
	if err := Validate(msg); err != nil {
		return b, err
	}
	size := marshalOpts.Size(msg)
	if limit := lim.For(t); size > limit {
		return b, frameErr(ErrFrameTooLarge, t, "payload of %d bytes exceeds the limit of %d", size, limit)
	}
	start := len(b)
	b = append(b, byte(t))
	b = binary.AppendUvarint(b, uint64(size))
	hdr := len(b)
	b, err := marshalOpts.MarshalAppend(b, msg)
	if err != nil {
		return b[:start], &FrameError{Code: ErrMalformed, Type: t, Reason: "encode payload", Err: err}
	}
	if len(b)-hdr != size {
		return b[:start], frameErr(ErrMalformed, t, "payload encoded to %d bytes, sized %d (message changed while encoding?)", len(b)-hdr, size)
	}
	return b, nil
}

// WriteFrame writes msg as one frame to w with the default limits, in a
// single Write call. It is NewEncoder(w, Limits{}).Encode(msg).
func WriteFrame(w io.Writer, msg proto.Message) error {
	return NewEncoder(w, Limits{}).Encode(msg)
}

// Encoder writes frames to a stream. It is not safe for concurrent use.
type Encoder struct {
	w   io.Writer
	lim Limits
	buf []byte
}

// keepBuf is the largest buffer an Encoder keeps between frames; a larger
// one (a big Update) is dropped after use so it does not pin memory.
const keepBuf = 64 << 10

// NewEncoder returns an Encoder that writes to w and refuses frames above
// lim.
func NewEncoder(w io.Writer, lim Limits) *Encoder {
	return &Encoder{w: w, lim: lim}
}

// Encode writes msg as one frame in a single Write call. An invalid or too
// large message is refused with a [*FrameError] and nothing is written.
func (e *Encoder) Encode(msg proto.Message) error {
	b, err := AppendFrame(e.buf[:0], msg, e.lim)
	if err != nil {
		return err
	}
	if cap(b) <= keepBuf {
		e.buf = b
	} else {
		e.buf = nil
	}
	if _, err := e.w.Write(b); err != nil {
		t, _ := TypeOf(msg)
		return fmt.Errorf("wire: write %s frame: %w", t, err)
	}
	return nil
}

// ReadFrame reads one frame from r and returns its message, validated
// (see [Validate]); an Update is returned in full form ([ExpandUpdate]),
// whichever form it travelled in. If maxSize > 0 it bounds every payload;
// otherwise the default per-type limits apply (1 MiB, 64 MiB for Update).
//
// ReadFrame reads the header a byte at a time when r is not an
// io.ByteReader, so it never reads past the frame; wrap r in a
// bufio.Reader (or use a [Decoder]) for speed. The payload is read with a
// single allocation when it is at most 1 MiB.
//
// A stream that ends cleanly before the first byte of a frame gives io.EOF
// itself. Protocol errors are [*FrameError]; errors of r are returned
// wrapped.
func ReadFrame(r io.Reader, maxSize int) (proto.Message, error) {
	lim := Limits{}
	if maxSize > 0 {
		lim = Limits{MaxControlFrame: maxSize, MaxUpdateFrame: maxSize}
	}
	br, ok := r.(io.ByteReader)
	if !ok {
		br = &oneByteReader{r: r}
	}
	return readFrame(r, br, lim, nil)
}

// oneByteReader reads single bytes from a reader without buffering.
type oneByteReader struct {
	r   io.Reader
	buf [1]byte
}

func (o *oneByteReader) ReadByte() (byte, error) {
	for {
		n, err := o.r.Read(o.buf[:])
		if n == 1 {
			return o.buf[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// preallocMax is the largest payload allocated in full before it arrives;
// a larger one grows as bytes arrive, so a peer cannot make the reader
// allocate a large buffer by sending only a header.
const preallocMax = 1 << 20

// readFrame reads one frame. allow, when not nil, is consulted right after
// the type byte so a frame not allowed in the current state is refused
// before its payload is read.
func readFrame(r io.Reader, br io.ByteReader, lim Limits, allow func(FrameType) error) (proto.Message, error) {
	tb, err := br.ReadByte()
	if err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("wire: read frame: %w", err)
	}
	t := FrameType(tb)
	if !t.Known() {
		return nil, &FrameError{Code: ErrUnknownType, Type: t, Reason: fmt.Sprintf("type byte %#02x; protocol version %d knows 1-%d", tb, ProtocolVersion, maxFrameType)}
	}
	if allow != nil {
		if err := allow(t); err != nil {
			return nil, err
		}
	}
	n, err := readUvarint(br, t)
	if err != nil {
		return nil, err
	}
	limit := lim.For(t)
	if n > uint64(limit) {
		return nil, frameErr(ErrFrameTooLarge, t, "declared payload of %d bytes exceeds the limit of %d", n, limit)
	}
	payload, err := readPayload(r, int(n))
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &FrameError{Code: ErrTruncated, Type: t, Reason: fmt.Sprintf("stream ended inside a %d-byte payload", n), Err: io.ErrUnexpectedEOF}
		}
		return nil, fmt.Errorf("wire: read %s payload: %w", t, err)
	}
	msg := newMessage(t)
	if err := proto.Unmarshal(payload, msg); err != nil {
		return nil, &FrameError{Code: ErrMalformed, Type: t, Reason: "payload is not a valid protobuf message", Err: err}
	}
	if u, ok := msg.(*lehrpb.Update); ok {
		// Validates, then fills in the full form (see ExpandUpdate).
		if err := ExpandUpdate(u); err != nil {
			return nil, err
		}
		return msg, nil
	}
	if err := Validate(msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// readUvarint reads a canonical (shortest-form) uvarint.
func readUvarint(br io.ByteReader, t FrameType) (uint64, error) {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := br.ReadByte()
		if err != nil {
			if err == io.EOF {
				return 0, &FrameError{Code: ErrTruncated, Type: t, Reason: "stream ended inside the length", Err: io.ErrUnexpectedEOF}
			}
			return 0, fmt.Errorf("wire: read %s length: %w", t, err)
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, frameErr(ErrMalformed, t, "length overflows 64 bits")
			}
			if b == 0 && i > 0 {
				return 0, frameErr(ErrMalformed, t, "length is not in shortest uvarint form")
			}
			return x | uint64(b)<<s, nil
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	return 0, frameErr(ErrMalformed, t, "length overflows 64 bits")
}

// readPayload reads exactly n bytes from r. Payloads up to preallocMax are
// read into one buffer allocated up front; larger ones grow by doubling as
// bytes arrive.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n <= preallocMax {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf := make([]byte, 0, preallocMax)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), n-len(buf)))
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if len(buf) == n {
			break
		}
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// Stream says which stream a [Decoder] reads, and so which frames it
// accepts in which order.
type Stream uint8

const (
	// StreamAny accepts every frame type in any order (no state checks).
	StreamAny Stream = iota
	// StreamControlFromAgent is the control stream as the distributor reads
	// it: Hello first, then Subscribe, Unsubscribe, Ack, Resync, Report,
	// Ping, Pong and Goodbye; nothing after Goodbye.
	StreamControlFromAgent
	// StreamControlFromDistributor is the control stream as the agent reads
	// it: Welcome (or Goodbye) first, then Unavailable, Ping, Pong and
	// Goodbye; nothing after Goodbye.
	StreamControlFromDistributor
	// StreamUpdate is a unidirectional update stream: exactly one Update,
	// then the end of the stream.
	StreamUpdate
)

func (s Stream) String() string {
	switch s {
	case StreamAny:
		return "any stream"
	case StreamControlFromAgent:
		return "control stream (agent to distributor)"
	case StreamControlFromDistributor:
		return "control stream (distributor to agent)"
	case StreamUpdate:
		return "update stream"
	}
	return fmt.Sprintf("stream kind %d", uint8(s))
}

// DecoderOptions configures a Decoder. The zero value accepts any frame
// with the default limits.
type DecoderOptions struct {
	// Limits bounds payload sizes; zero fields mean the defaults.
	Limits Limits
	// Stream selects the frame order rules; zero is StreamAny.
	Stream Stream
}

// Decoder reads frames from one stream and enforces the stream's frame
// order. It buffers its input, so it must be the stream's only reader. It
// is not safe for concurrent use.
type Decoder struct {
	br     *bufio.Reader
	opts   DecoderOptions
	frames int  // frames decoded so far
	done   bool // Goodbye (or the one Update) seen: only EOF may follow
}

// NewDecoder returns a Decoder reading r.
func NewDecoder(r io.Reader, opts DecoderOptions) *Decoder {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 4096)
	}
	return &Decoder{br: br, opts: opts}
}

// Decode reads the next frame, validated, and an Update in full form as
// with [ReadFrame]. It returns io.EOF when the stream ends cleanly between
// frames, a [*FrameError] for protocol errors (including ErrUnexpected for
// a frame the stream's state does not allow) and the stream's own errors
// wrapped otherwise.
func (d *Decoder) Decode() (proto.Message, error) {
	msg, err := readFrame(d.br, d.br, d.opts.Limits, d.allow)
	if err != nil {
		if err == io.EOF && d.opts.Stream == StreamUpdate && d.frames == 0 {
			return nil, &FrameError{Code: ErrTruncated, Reason: "update stream ended before its Update frame", Err: io.ErrUnexpectedEOF}
		}
		return nil, err
	}
	d.frames++
	t, _ := TypeOf(msg)
	if t == FrameGoodbye || d.opts.Stream == StreamUpdate {
		d.done = true
	}
	return msg, nil
}

// allow applies the stream's frame order rules to the next frame's type.
func (d *Decoder) allow(t FrameType) error {
	s := d.opts.Stream
	if s == StreamAny {
		return nil
	}
	if d.done {
		if s == StreamUpdate {
			return frameErr(ErrUnexpected, t, "a second frame on an update stream; it carries exactly one Update")
		}
		return frameErr(ErrUnexpected, t, "frame after Goodbye on the %s", s)
	}
	first := d.frames == 0
	var ok bool
	var want string
	switch s {
	case StreamControlFromAgent:
		if first {
			ok, want = t == FrameHello, "Hello first"
		} else {
			switch t {
			case FrameSubscribe, FrameUnsubscribe, FrameAck, FrameResync, FrameReport, FrameSignals, FramePing, FramePong, FrameGoodbye:
				ok = true
			}
			want = "Subscribe, Unsubscribe, Ack, Resync, Report, Signals, Ping, Pong or Goodbye after Hello"
		}
	case StreamControlFromDistributor:
		if first {
			ok, want = t == FrameWelcome || t == FrameGoodbye, "Welcome or Goodbye first"
		} else {
			switch t {
			case FrameUnavailable, FrameSignalsRequest, FrameAdvice, FramePing, FramePong, FrameGoodbye:
				ok = true
			}
			want = "Unavailable, SignalsRequest, Advice, Ping, Pong or Goodbye after Welcome"
		}
	case StreamUpdate:
		ok, want = t == FrameUpdate, "one Update"
	}
	if !ok {
		return frameErr(ErrUnexpected, t, "not allowed here on the %s: want %s", s, want)
	}
	return nil
}
