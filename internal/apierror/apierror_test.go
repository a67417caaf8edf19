package apierror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestRoundTripThroughStatus(t *testing.T) {
	in := New(codes.FailedPrecondition, ReasonStaleVersion, "base_version", "base 3 is not the latest version").WithLimit("n/a")
	in.CurrentVersion = 7
	// What a client sees: only the status, rebuilt from its proto form.
	wire := status.FromProto(in.GRPCStatus().Proto()).Err()
	got := FromError(wire)
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !errors.Is(got, ErrConflict) || !errors.Is(got, ErrPrecondition) {
		t.Errorf("errors.Is(%v, ErrConflict/ErrPrecondition) = false", got)
	}
	if errors.Is(got, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) = true", got)
	}
}

func TestFromErrorOther(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{status.Error(codes.Unavailable, "etcd down"), codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{fmt.Errorf("wrapped: %w", New(codes.NotFound, ReasonNotFound, "namespace", "no such namespace")), codes.NotFound},
	}
	for _, tt := range tests {
		if got := FromError(tt.err); got.Code != tt.want {
			t.Errorf("FromError(%v).Code = %v, want %v", tt.err, got.Code, tt.want)
		}
	}
	if FromError(nil) != nil {
		t.Error("FromError(nil) != nil")
	}
	if !FromError(status.Error(codes.Unavailable, "x")).Retryable() {
		t.Error("Unavailable is not retryable")
	}
}

// An Error made from another error keeps it reachable for errors.Is and
// errors.As in the process that made it; the wire form carries only the
// message.
func TestCauseUnwraps(t *testing.T) {
	cause := fmt.Errorf("read meta: %w", os.ErrNotExist)
	e := Wrap(cause, codes.NotFound, ReasonNotFound, "namespace")
	if !errors.Is(e, os.ErrNotExist) || !errors.Is(e, ErrNotFound) {
		t.Errorf("errors.Is through Wrap: cause %v, sentinel %v; want both true", errors.Is(e, os.ErrNotExist), errors.Is(e, ErrNotFound))
	}
	if e.Message != cause.Error() {
		t.Errorf("Message = %q, want the cause's text %q", e.Message, cause.Error())
	}
	w := New(codes.Internal, ReasonInternal, "", "get: %v", cause).WithCause(cause)
	if !errors.Is(fmt.Errorf("outer: %w", w), os.ErrNotExist) {
		t.Error("errors.Is does not reach WithCause's cause through a wrapping error")
	}
	back := FromError(status.ErrorProto(e.GRPCStatus().Proto()))
	if back.Cause != nil || back.Message != e.Message || back.Reason != e.Reason {
		t.Errorf("round trip = %+v; want the message and reason, and no cause", back)
	}
}

// A message that embeds a caller's input whole is cut on the wire; it
// says how long it was.
func TestLongMessageIsCut(t *testing.T) {
	long := New(codes.InvalidArgument, ReasonValidationFailed, "properties[0].value", "condition does not compile: %s", strings.Repeat("x", 100<<10))
	st := long.GRPCStatus()
	if n := proto.Size(st.Proto()); n > 4*MaxMessageBytes {
		t.Errorf("status of a 100 KiB message: %d bytes; want at most %d", n, 4*MaxMessageBytes)
	}
	got := FromError(st.Err())
	if len(got.Message) > MaxMessageBytes || !strings.HasSuffix(got.Message, "… (102428 bytes)") {
		t.Errorf("message on the wire: %d bytes ending %q; want at most %d ending with its length", len(got.Message), got.Message[max(0, len(got.Message)-30):], MaxMessageBytes)
	}
	if len(long.Error()) > MaxMessageBytes+200 {
		t.Errorf("Error() is %d bytes; want the message cut", len(long.Error()))
	}
	short := New(codes.InvalidArgument, ReasonInvalidArgument, "f", "short")
	if got := FromError(short.GRPCStatus().Err()); got.Message != "short" {
		t.Errorf("a short message on the wire: %q; want it whole", got.Message)
	}
}
