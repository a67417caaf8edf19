// Package reflecttest reads a gRPC server's schema through server
// reflection, as grpcurl and other gRPC tools do, so that a test can check
// that a server describes all it serves: every service listed, every file
// they are defined in fetched with everything it imports, and the whole
// resolving.
//
// Only tests import reflecttest (internal/archtest checks it).
package reflecttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// The reflection methods of the two versions servers offer. v1alpha is
// the same protocol under another name (its messages are v1's, field for
// field), and what older tools ask for.
const (
	V1      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	V1Alpha = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)

// Schema is what a server says of itself over reflection.
type Schema struct {
	// Services are the full names ListServices returned, sorted.
	Services []string
	// Files holds every file defining one of Services and every file
	// those import, transitively: each descriptor in them resolves.
	Files *protoregistry.Files
}

// Fetch asks the server behind conn over reflection method (V1 or
// V1Alpha) for its services and for the files defining them with their
// imports. The error of a call the server refused keeps its gRPC status
// (status.Code).
func Fetch(ctx context.Context, conn grpc.ClientConnInterface, method string) (*Schema, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A stream opened by method name rather than through the generated v1
	// client, so that one code path speaks both versions: v1alpha's
	// messages encode as v1's.
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return nil, err
	}
	ask := func(req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
		if err := st.SendMsg(req); err != nil {
			if errors.Is(err, io.EOF) { // the server ended the stream: its status says why
				err = st.RecvMsg(new(rpb.ServerReflectionResponse))
			}
			return nil, err
		}
		resp := new(rpb.ServerReflectionResponse)
		if err := st.RecvMsg(resp); err != nil {
			return nil, err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return nil, status.Error(codes.Code(e.GetErrorCode()), e.GetErrorMessage())
		}
		return resp, nil
	}

	resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	s := &Schema{}
	for _, svc := range resp.GetListServicesResponse().GetService() {
		s.Services = append(s.Services, svc.GetName())
	}
	slices.Sort(s.Services)

	files := map[string]*descriptorpb.FileDescriptorProto{}
	var order []string // as received: protodesc.NewFiles takes any order
	add := func(resp *rpb.ServerReflectionResponse) error {
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fd); err != nil {
				return fmt.Errorf("a file descriptor: %w", err)
			}
			if _, ok := files[fd.GetName()]; !ok {
				files[fd.GetName()] = fd
				order = append(order, fd.GetName())
			}
		}
		return nil
	}
	for _, svc := range s.Services {
		resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}})
		if err != nil {
			return nil, fmt.Errorf("the file defining %s: %w", svc, err)
		}
		if err := add(resp); err != nil {
			return nil, fmt.Errorf("the file defining %s: %w", svc, err)
		}
	}
	// A server sends each file's imports along with it, once per stream;
	// ask by name for any it left out.
	for i := 0; i < len(order); i++ {
		for _, dep := range files[order[i]].GetDependency() {
			if _, ok := files[dep]; ok {
				continue
			}
			resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}})
			if err != nil {
				return nil, fmt.Errorf("file %s (imported by %s): %w", dep, order[i], err)
			}
			if err := add(resp); err != nil {
				return nil, fmt.Errorf("file %s: %w", dep, err)
			}
			if _, ok := files[dep]; !ok {
				return nil, fmt.Errorf("file %s (imported by %s): the server answered with other files", dep, order[i])
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}

	set := &descriptorpb.FileDescriptorSet{}
	for _, name := range order {
		set.File = append(set.File, files[name])
	}
	if s.Files, err = protodesc.NewFiles(set); err != nil {
		return nil, fmt.Errorf("the files the server sent do not resolve: %w", err)
	}
	return s, nil
}

// Differences compares every file of s with the file of the same name in
// reg (protoregistry.GlobalFiles: what the server's binary was built
// with) and returns one line per file missing from reg or described
// otherwise; none when the server describes exactly what it runs.
func (s *Schema) Differences(reg *protoregistry.Files) []string {
	var out []string
	s.Files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		want, err := reg.FindFileByPath(fd.Path())
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", fd.Path(), err))
			return true
		}
		if !proto.Equal(protodesc.ToFileDescriptorProto(fd), protodesc.ToFileDescriptorProto(want)) {
			out = append(out, fmt.Sprintf("%s: the server describes it otherwise than it is compiled", fd.Path()))
		}
		return true
	})
	slices.Sort(out)
	return out
}
