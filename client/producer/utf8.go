package producer

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/utf8field"
)

// Text fields must be UTF-8: protobuf refuses to marshal a request with a
// string field that is not, and gRPC reports that as INTERNAL with no
// field. The client checks every request first and refuses it, unsent, as
// INVALID_ARGUMENT naming the field (control does the same for requests
// from other clients).

// utf8Error is the refusal of a request whose field is not UTF-8.
func utf8Error(field string) *Error {
	return invalidArg(field, "%s is not valid UTF-8: text (names, keys, content types, messages, authors) must be UTF-8; only property values may hold any bytes. Check the encoding of what you passed (a terminal or file in Latin-1?)", field)
}

func checkUTF8Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(proto.Message); ok {
		if field := utf8field.Find(m); field != "" {
			return utf8Error(field)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// checkUTF8Stream checks every message a stream sends. A refused message
// ends the stream (its context is cancelled), as a failed send would.
func checkUTF8Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &utf8Stream{ClientStream: cs, cancel: cancel}, nil
}

type utf8Stream struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *utf8Stream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		if field := utf8field.Find(pm); field != "" {
			s.cancel()
			return utf8Error(field)
		}
	}
	return s.ClientStream.SendMsg(m)
}

// RecvMsg releases the stream's context once the stream has ended.
func (s *utf8Stream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}
