package service

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/utf8field"
)

// UTF8Guard refuses a request whose text is not UTF-8 as INVALID_ARGUMENT
// naming the field. Protobuf cannot parse such a request at all, and gRPC
// answers a codec's failure with INTERNAL and no field, whatever the
// codec says; so its Codec parses as gRPC's does and, when a string field
// is not UTF-8 (utf8field.FindWire), leaves the request empty and notes the
// field against it, and its interceptors — first in their chains — refuse
// the request so noted before anything else runs. (Requests from the Go
// client never get here: client/producer refuses them unsent.)
type UTF8Guard struct {
	base   encoding.CodecV2
	faults sync.Map // request message → the field that is not UTF-8
}

// NewUTF8Guard returns a guard; pass Codec to grpc.ForceServerCodecV2 and
// put Unary and Stream first in the interceptor chains.
func NewUTF8Guard() *UTF8Guard {
	return &UTF8Guard{base: encoding.GetCodecV2(protocodec.Name)}
}

// Codec returns gRPC's protobuf codec, but for the requests it notes.
func (g *UTF8Guard) Codec() encoding.CodecV2 { return (*utf8Codec)(g) }

type utf8Codec UTF8Guard

func (c *utf8Codec) Name() string                           { return c.base.Name() }
func (c *utf8Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	field := utf8field.FindWire(data.Materialize(), m.ProtoReflect().Descriptor())
	if field == "" {
		return err
	}
	proto.Reset(m)
	c.faults.Store(v, field)
	return nil
}

// refusal returns the error for a request the codec noted, and forgets it.
func (g *UTF8Guard) refusal(req any) error {
	field, ok := g.faults.LoadAndDelete(req)
	if !ok {
		return nil
	}
	return apierror.New(codes.InvalidArgument, apierror.ReasonInvalidArgument, field.(string),
		"%s is not valid UTF-8: text (names, keys, content types, messages, authors) must be UTF-8; only property values may hold any bytes", field)
}

// Unary refuses a request the codec noted.
func (g *UTF8Guard) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := g.refusal(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream refuses every message of a stream the codec noted.
func (g *UTF8Guard) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &utf8Stream{ServerStream: ss, g: g})
}

type utf8Stream struct {
	grpc.ServerStream
	g *UTF8Guard
}

func (s *utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.refusal(m)
}
