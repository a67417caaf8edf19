package control_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// rawCodec sends a request's bytes as they are — what a client in another
// language may send, which Go's protobuf would refuse to marshal — and
// parses answers with protobuf.
type rawCodec struct{}

type rawRequest []byte

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawRequest))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// str appends field n of the wire format as the string s, unchecked.
func str(b []byte, n protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// Text that is not UTF-8 in a key, a message or any other string field is
// INVALID_ARGUMENT naming the field, and changes nothing (issue 28, item
// 8): it was INTERNAL with no field, from control for a client in another
// language, and from the Go client itself, which could not marshal it.
func TestInvalidUTF8NamesTheField(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{})
	ctx := testCtx(t)
	if _, err := srv.Client.CreateDomain(ctx, &lehrpb.CreateDomainRequest{Domain: &lehrpb.Domain{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
	const bad = "caf\xe9"

	// A client that sends what it likes, field by field.
	num := func(m proto.Message, field string) protowire.Number {
		return m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(field)).Number()
	}
	pub, pr := &lehrpb.PublishRequest{}, &lehrpb.Property{}
	prop := func(key string) []byte {
		p := str(nil, num(pr, "key"), key)
		p = protowire.AppendTag(p, num(pr, "value"), protowire.BytesType)
		return protowire.AppendBytes(p, []byte("\xff any bytes"))
	}
	props := func(b []byte, keys ...string) []byte {
		for _, k := range keys {
			b = protowire.AppendTag(b, num(pub, "properties"), protowire.BytesType)
			b = protowire.AppendBytes(b, prop(k))
		}
		return b
	}
	ns := str(nil, num(pub, "namespace"), "d/app")
	for _, tc := range []struct {
		name, method string
		req          []byte
		want         string
	}{
		{"a message", "/lehr.v1.Control/Publish", str(props(ns, "ok"), num(pub, "message"), bad), "message"},
		{"a key", "/lehr.v1.Control/Publish", props(ns, "ok", bad), "properties[1].key"},
		{"a namespace", "/lehr.v1.Control/Get", str(nil, num(&lehrpb.GetRequest{}, "namespace"), "d/"+bad), "namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := srv.Conn.Invoke(ctx, tc.method, rawRequest(tc.req), &lehrpb.PublishResponse{}, grpc.ForceCodecV2(rawCodec{}))
			e := apierror.FromError(err)
			if e.Code != codes.InvalidArgument || e.Field != tc.want || e.Reason != apierror.ReasonInvalidArgument {
				t.Errorf("%s = %v; want INVALID_ARGUMENT on %s", tc.method, err, tc.want)
			}
		})
	}

	// A stream names its field too.
	stream, err := srv.Conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/lehr.v1.Control/WatchGoals", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(rawRequest(str(nil, num(&lehrpb.WatchGoalsRequest{}, "zone"), bad))); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	if err := stream.RecvMsg(&lehrpb.WatchGoalsResponse{}); apierror.FromError(err).Code != codes.InvalidArgument || apierror.FromError(err).Field != "zone" {
		t.Errorf("WatchGoals with a zone not UTF-8 = %v; want INVALID_ARGUMENT on zone", err)
	}

	// The Go client refuses it unsent, the same way.
	cl, err := producer.New(producer.Options{Address: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Publish(ctx, "d/app", []producer.Property{{Key: "k", Value: []byte("v")}}, producer.WithMessage(bad))
	var perr *producer.Error
	if !errors.As(err, &perr) || perr.Code != codes.InvalidArgument || perr.Field != "message" {
		t.Errorf("producer Publish with a message not UTF-8 = %v; want INVALID_ARGUMENT on message", err)
	}
	_, err = cl.Publish(ctx, "d/app", []producer.Property{{Key: bad, Value: []byte("v")}})
	if !errors.As(err, &perr) || perr.Code != codes.InvalidArgument || perr.Field != "properties[0].key" {
		t.Errorf("producer Publish with a key not UTF-8 = %v; want INVALID_ARGUMENT on properties[0].key", err)
	}

	// Nothing was stored.
	if _, err := srv.Client.History(ctx, &lehrpb.HistoryRequest{Namespace: "d/app"}); apierror.FromError(err).Code != codes.NotFound {
		t.Errorf("History after the refusals: %v; want NOT_FOUND (no namespace)", err)
	}
}
