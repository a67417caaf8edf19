// Package wire is the QUIC protocol between a zonal distributor and the
// per-host agent: its constants, framing, message validation, frame-order
// rules, version and capability negotiation, the compact encoding of
// updates, error codes, and thin helpers over quic-go for the two kinds of
// streams. What an Update does to a host's copy of a namespace (building,
// planning, checking and applying one) is package internal/update.
// docs/wire.md is the specification; this package implements the parts
// both sides share.
//
// Imported by distributor/fanout, internal/update, agent, agent/agentcmd,
// agent/upstream, agent/agenttest, bench, cmd/lehr-bench and tests;
// consumers read files and the agent's unix-socket API, never the wire.
//
// # Connections and streams
//
// The agent dials the distributor with TLS 1.3 and ALPN [ALPN] ("lehr/1").
// On a connection:
//
//   - The agent opens ONE bidirectional control stream and sends Hello as its
//     first frame; the distributor answers Welcome (or Goodbye and a close).
//     Afterwards the agent sends Subscribe, Unsubscribe, Ack, Resync and
//     Report, the distributor sends Unavailable, and either sends Ping, Pong
//     and Goodbye. [Control] wraps this stream.
//   - The distributor opens one unidirectional stream per Update, writes the
//     single Update frame and closes the stream, so a large snapshot never
//     blocks a small patch. [SendUpdate] and [ReadUpdateStream] do this.
//
// # Frames
//
// Every message travels in a frame:
//
//	type (1 byte) | length (uvarint, shortest form) | payload (protobuf, length bytes)
//
// [FrameType] lists the types. [Encoder] and [WriteFrame] write frames,
// [Decoder] and [ReadFrame] read them; both validate the message
// ([Validate]) and enforce [Limits]. A [Decoder] also enforces the frame
// order of its [Stream]. Protocol errors are [*FrameError]; the receiver
// closes the connection with [CodeFor] of the error ([CloseConn]).
package wire

// ALPN is the TLS application protocol of protocol major version 1. A
// future incompatible framing would use "lehr/2"; versions within the
// framing are negotiated by Hello and Welcome instead (see [Negotiate]).
const ALPN = "lehr/1"

// Protocol versions this package speaks. A Hello announces the range
// [min_protocol_version, protocol_version]; the distributor chooses the
// highest version in both ranges.
const (
	// ProtocolVersion is the highest protocol version spoken.
	ProtocolVersion uint32 = 1
	// MinProtocolVersion is the lowest protocol version spoken.
	MinProtocolVersion uint32 = 1
)
