// Command googleapis writes a protobuf FileDescriptorSet holding
// google/longrunning/operations.proto, google/api/annotations.proto (the
// google.api.http option of the HTTP/JSON mapping) and every file they
// import, taken from the Go packages compiled into this program. `make
// proto` hands it to protoc with --descriptor_set_in, so Lehr's protos can
// import the standard long-running operation types and HTTP annotations
// without a copy of googleapis in this tree.
//
// Usage:
//
//	go run ./proto/googleapis > bin/googleapis.binpb
package main

import (
	"fmt"
	"os"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := range imps.Len() {
			add(imps.Get(i).FileDescriptor)
		}
		// Dependencies first: protoc reads the set in order.
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(longrunningpb.File_google_longrunning_operations_proto)
	add(annotations.File_google_api_annotations_proto)
	b, err := proto.Marshal(set)
	if err != nil {
		fmt.Fprintln(os.Stderr, "googleapis:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(b); err != nil {
		fmt.Fprintln(os.Stderr, "googleapis:", err)
		os.Exit(1)
	}
}
