package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/quic-go/quic-go"
)

// FrameErrorCode classifies a [FrameError]. The codes are errors themselves,
// so errors.Is(err, ErrFrameTooLarge) matches any FrameError with that code.
type FrameErrorCode uint8

// Frame error codes. Every one of them is a protocol violation by the peer
// that sent the frame (or, from an Encoder, a bug in the caller): the
// receiver closes the connection with [CodeFor] of the error.
const (
	// ErrUnknownType: the frame's type byte is not a [FrameType] of this
	// protocol version.
	ErrUnknownType FrameErrorCode = iota + 1
	// ErrFrameTooLarge: the declared payload length exceeds the limit for
	// the frame's type ([Limits]).
	ErrFrameTooLarge
	// ErrMalformed: the header is not canonical, the payload is not a valid
	// protobuf of the frame's message, or a required field is missing or
	// invalid (see [Validate]).
	ErrMalformed
	// ErrTruncated: the stream ended inside a frame.
	ErrTruncated
	// ErrUnexpected: a valid frame of a type not allowed on this stream or
	// in the stream's current state (e.g. a second Hello, an Update on the
	// control stream, a second frame on an update stream).
	ErrUnexpected
)

var frameErrorNames = [...]string{
	ErrUnknownType:   "unknown frame type",
	ErrFrameTooLarge: "frame too large",
	ErrMalformed:     "malformed frame",
	ErrTruncated:     "truncated frame",
	ErrUnexpected:    "unexpected frame",
}

// Error returns the code's description with the package prefix.
func (c FrameErrorCode) Error() string {
	if int(c) < len(frameErrorNames) && frameErrorNames[c] != "" {
		return "wire: " + frameErrorNames[c]
	}
	return fmt.Sprintf("wire: frame error %d", uint8(c))
}

// FrameError is a frame that could not be accepted: which type (0 when the
// type byte itself was bad or not read), which rule it broke and why.
type FrameError struct {
	Code FrameErrorCode
	// Type is the frame's type byte, possibly not a known FrameType.
	Type FrameType
	// Reason names the offending field or byte and what is allowed.
	Reason string
	// Err is the underlying error, if any (e.g. the protobuf decoding error,
	// or io.ErrUnexpectedEOF for ErrTruncated).
	Err error
}

func (e *FrameError) Error() string {
	msg := e.Code.Error()
	if e.Type != 0 {
		msg += " (" + e.Type.String() + ")"
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the code and the underlying error, so errors.Is matches
// both.
func (e *FrameError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Code}
	}
	return []error{e.Code, e.Err}
}

func frameErr(code FrameErrorCode, t FrameType, format string, args ...any) *FrameError {
	return &FrameError{Code: code, Type: t, Reason: fmt.Sprintf(format, args...)}
}

// ErrUnsupportedVersion is wrapped by negotiation errors: no protocol
// version both sides speak.
var ErrUnsupportedVersion = errors.New("wire: unsupported protocol version")

// QUIC application error codes, sent in CONNECTION_CLOSE by whichever side
// closes a connection. They are part of the protocol: never renumber.
const (
	// CodeNoError: a deliberate, orderly close.
	CodeNoError quic.ApplicationErrorCode = 0x0
	// CodeInternalError: the closing side failed; reconnect (with backoff).
	CodeInternalError quic.ApplicationErrorCode = 0x1
	// CodeProtocolViolation: the peer sent a frame that is unknown,
	// malformed, truncated or not allowed in the stream's state.
	CodeProtocolViolation quic.ApplicationErrorCode = 0x2
	// CodeFrameTooLarge: the peer sent a frame above the receiver's limit.
	CodeFrameTooLarge quic.ApplicationErrorCode = 0x3
	// CodeUnsupportedVersion: no common protocol version; the agent must
	// not retry this distributor with the same versions.
	CodeUnsupportedVersion quic.ApplicationErrorCode = 0x4
	// CodeUnauthorized: the peer's identity (certificate, host_id) is not
	// allowed.
	CodeUnauthorized quic.ApplicationErrorCode = 0x5
	// CodeWrongZone: the agent's zone is not the distributor's.
	CodeWrongZone quic.ApplicationErrorCode = 0x6
	// CodeShuttingDown: the distributor (or agent) is stopping; the agent
	// fails over to another distributor at once.
	CodeShuttingDown quic.ApplicationErrorCode = 0x7
	// CodeOverloaded: the distributor refuses more agents; fail over.
	CodeOverloaded quic.ApplicationErrorCode = 0x8
	// CodeHandshakeTimeout: no Hello (or Welcome) arrived in time.
	CodeHandshakeTimeout quic.ApplicationErrorCode = 0x9
	// CodeReplaced: a newer connection from the same host_id replaced this
	// one.
	CodeReplaced quic.ApplicationErrorCode = 0xa
	// CodeUntrusted: the distributor sent a version whose signature does
	// not verify against the agent's trusted keys; the agent fails over.
	CodeUntrusted quic.ApplicationErrorCode = 0xb
	// CodeSilent: (agent) nothing arrived from the distributor for the
	// agent's silence timeout (Liveness); the agent fails over.
	CodeSilent quic.ApplicationErrorCode = 0xc
)

var codeNames = map[quic.ApplicationErrorCode]string{
	CodeNoError:            "no error",
	CodeInternalError:      "internal error",
	CodeProtocolViolation:  "protocol violation",
	CodeFrameTooLarge:      "frame too large",
	CodeUnsupportedVersion: "unsupported protocol version",
	CodeUnauthorized:       "unauthorized",
	CodeWrongZone:          "wrong zone",
	CodeShuttingDown:       "shutting down",
	CodeOverloaded:         "overloaded",
	CodeHandshakeTimeout:   "handshake timeout",
	CodeReplaced:           "replaced by a newer connection",
	CodeUntrusted:          "untrusted version",
	CodeSilent:             "silent peer",
}

// CodeName describes an application error code, for logs.
func CodeName(c quic.ApplicationErrorCode) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("unknown code %#x", uint64(c))
}

// QUIC stream error codes, used to reset or abandon one update stream
// without closing the connection.
const (
	// StreamCodeCancelled: the sender (or receiver) gave up on the stream,
	// e.g. its context ended or a newer version superseded the update.
	StreamCodeCancelled quic.StreamErrorCode = 0x1
	// StreamCodeRejected: the receiver refused the stream's content (a
	// frame error). The connection is normally closed right after.
	StreamCodeRejected quic.StreamErrorCode = 0x2
)

// CodeFor returns the application error code to close a connection with
// after err: a [FrameError] is a protocol violation (or frame too large),
// [ErrUnsupportedVersion] maps to CodeUnsupportedVersion, a [GoodbyeError]
// keeps its code, anything else is an internal error.
func CodeFor(err error) quic.ApplicationErrorCode {
	var fe *FrameError
	var ge *GoodbyeError
	var se *SilenceError
	switch {
	case err == nil:
		return CodeNoError
	case errors.As(err, &se):
		return CodeSilent
	case errors.As(err, &fe):
		if fe.Code == ErrFrameTooLarge {
			return CodeFrameTooLarge
		}
		return CodeProtocolViolation
	case errors.Is(err, ErrUnsupportedVersion):
		return CodeUnsupportedVersion
	case errors.As(err, &ge):
		return ge.Code
	default:
		return CodeInternalError
	}
}

// CloseCode extracts the application error code a connection was closed
// with from an error returned by a connection or stream operation, and
// whether the peer (rather than this side) closed it.
func CloseCode(err error) (code quic.ApplicationErrorCode, remote, ok bool) {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) {
		return ae.ErrorCode, ae.Remote, true
	}
	return 0, false, false
}

// GoodbyeError reports a Goodbye received from the peer.
type GoodbyeError struct {
	Code   quic.ApplicationErrorCode
	Reason string
	// RetryAfter is how long to wait before reconnecting to this peer; zero
	// means no wait was asked for.
	RetryAfter time.Duration
}

func (e *GoodbyeError) Error() string {
	msg := fmt.Sprintf("wire: peer said goodbye: %s", CodeName(e.Code))
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return msg
}
