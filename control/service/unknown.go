package service

import (
	"context"
	"path"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Unknown protobuf fields: a request may carry fields this control does
// not know (a newer client, or junk). Handlers store parts of requests as
// they came (a domain, a rollout policy, an experiment's rules, an
// evaluation's trials), and protobuf keeps unknown fields through Clone and
// Marshal — so a caller with no rights could store megabytes that no check
// counted. Every request therefore loses its unknown fields before any
// handler or interceptor sees it: nothing control does reads them.

// DropUnknownInterceptor clears the unknown fields of every unary request,
// in every message it holds (nested, in lists and in map values), before
// the rest of the chain runs; it must come first (after UTF8Guard, which
// lets no handler run). Each request that had
// some is counted in lehr_control_unknown_fields_dropped_total{method}.
func (s *Service) DropUnknownInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok && discardUnknown(m.ProtoReflect()) {
		s.countUnknown(info.FullMethod)
	}
	return handler(ctx, req)
}

// DropUnknownStreamInterceptor does the same for every message a stream
// receives.
func (s *Service) DropUnknownStreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &dropUnknownStream{ServerStream: ss, s: s, method: info.FullMethod})
}

type dropUnknownStream struct {
	grpc.ServerStream
	s      *Service
	method string
}

func (d *dropUnknownStream) RecvMsg(m any) error {
	if err := d.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok && discardUnknown(pm.ProtoReflect()) {
		d.s.countUnknown(d.method)
	}
	return nil
}

func (s *Service) countUnknown(fullMethod string) {
	s.metrics.GetOrCreateCounter(`lehr_control_unknown_fields_dropped_total{method="` + path.Base(fullMethod) + `"}`).Inc()
}

// discardUnknown clears the unknown fields of m and of every message it
// holds, and reports whether there were any.
func discardUnknown(m protoreflect.Message) bool {
	dropped := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					dropped = discardUnknown(mv.Message()) || dropped
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				l := v.List()
				for i := range l.Len() {
					dropped = discardUnknown(l.Get(i).Message()) || dropped
				}
			}
		case fd.Message() != nil:
			dropped = discardUnknown(v.Message()) || dropped
		}
		return true
	})
	if len(m.GetUnknown()) > 0 {
		m.SetUnknown(nil)
		dropped = true
	}
	return dropped
}
