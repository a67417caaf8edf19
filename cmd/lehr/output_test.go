package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name.golden, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

func info(seq uint64, src lehrpb.VersionSource, parent, rollbackOf uint64, author, msg string) *lehrpb.VersionInfo {
	return &lehrpb.VersionInfo{
		Namespace: "demo/app", Seq: seq, Checksum: fmt.Sprintf("sha256:%x", sha256.Sum256([]byte{byte(seq)})),
		Author: author, Message: msg, CreateTime: ts(time.Duration(seq) * time.Minute),
		Parent: parent, Source: src, RollbackOf: rollbackOf, SizeBytes: int64(100 * seq), PropertyCount: int32(seq + 2),
	}
}

func TestWriteVersionGolden(t *testing.T) {
	v := &producer.Version{
		Info: info(3, lehrpb.VersionSource_VERSION_SOURCE_PATCH, 2, 0, "alice", "more headroom"),
		Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Properties: []producer.Property{
			jsonProp("features", `{"dark_mode":false}`),
			text("greeting", "hello\nworld\n"),
			{Key: "blob", Value: bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 10), ContentType: ctBin},
			{Key: "empty", Value: nil},
		},
	}
	v.Info.TransportIdentity = "127.0.0.1:53211"
	var b bytes.Buffer
	writeVersion(&b, v)
	golden(t, "get", b.Bytes())

	b.Reset()
	v.Partial = true
	v.Properties = v.Properties[:1]
	writeVersion(&b, v)
	golden(t, "get-partial", b.Bytes())
}

func TestWriteHistoryGolden(t *testing.T) {
	var b bytes.Buffer
	writeHistory(&b, []*lehrpb.VersionInfo{
		info(4, lehrpb.VersionSource_VERSION_SOURCE_ROLLBACK, 3, 1, "oncall", "back out\nsecond line"),
		info(3, lehrpb.VersionSource_VERSION_SOURCE_PATCH, 2, 0, "alice", "more headroom"),
		info(2, lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, 1, 0, "", ""),
		info(1, lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, 0, 0, "bob", "first cut"),
	})
	golden(t, "history", b.Bytes())
}

func TestWriteDiffGolden(t *testing.T) {
	oldRPS, newRPS := jsonProp("limits/rps", "100"), jsonProp("limits/rps", "250")
	oldT, newT := text("motd", "hi"), jsonProp("motd", `{"text":"hi"}`)
	added, removed := jsonProp("features/x", `{"a":1}`), text("greeting", "hello")
	var b bytes.Buffer
	writeDiff(&b, &producer.Diff{
		From: info(1, lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT, 0, 0, "bob", ""),
		To:   info(3, lehrpb.VersionSource_VERSION_SOURCE_PATCH, 2, 0, "alice", ""),
		Changes: []producer.Change{
			{Key: "features/x", New: &added},
			{Key: "greeting", Old: &removed},
			{Key: "limits/rps", Old: &oldRPS, New: &newRPS},
			{Key: "motd", Old: &oldT, New: &newT},
		},
	})
	golden(t, "diff", b.Bytes())
}

func TestWriteMiscGolden(t *testing.T) {
	var b bytes.Buffer
	writeCommitted(&b, "patched", info(3, lehrpb.VersionSource_VERSION_SOURCE_PATCH, 2, 0, "alice", ""))
	d := &lehrpb.Domain{
		Name: "payments", Description: "payment limits", CreateTime: ts(0), CreatedBy: "alice",
		Quotas: &lehrpb.Quotas{MaxNamespaceBytes: 1 << 20, MaxProperties: 50, PublishesPerSecond: 2.5, PublishBurst: 5},
		Acl:    &lehrpb.Acl{Publishers: []string{"alice", "ci"}, Admins: []string{"alice"}},
		// As control answers GetDomain: the quotas in force and the usage.
		EffectiveQuotas: &lehrpb.Quotas{MaxNamespaceBytes: 1 << 20, MaxProperties: 50, PublishesPerSecond: 2.5, PublishBurst: 5,
			MaxStoredBytes: 256 << 20, MaxValueBytes: 512 << 10, MaxNamespaces: 1000, OutboundBytesPerSecond: 128 << 20},
		Usage: &lehrpb.DomainUsage{StoredBytes: 3 << 20, Namespaces: 12},
	}
	fmt.Fprintln(&b)
	writeDomain(&b, d)
	fmt.Fprintln(&b)
	writeDomain(&b, &lehrpb.Domain{Name: "demo"})
	fmt.Fprintln(&b)
	writeDomains(&b, []*lehrpb.Domain{d, {Name: "demo", CreateTime: ts(time.Hour)}})
	fmt.Fprintln(&b)
	writeZones(&b, []*lehrpb.Zone{{Name: "us-east-1a", CreateTime: ts(0), LastReportTime: ts(time.Minute)}, {Name: "eu-west-1b", CreateTime: ts(time.Second)}})
	fmt.Fprintln(&b)
	writeGoals(&b, "us-east-1a", &lehrpb.GetGoalsResponse{Revision: 42, Goals: []*lehrpb.GoalState{
		{Zone: "us-east-1a", Namespace: "demo/app", Version: 3, Checksum: "sha256:abc", UpdateTime: ts(time.Minute), Reason: "publish"},
		{Zone: "us-east-1a", Namespace: "demo/banner", Version: 1, Checksum: "sha256:def", UpdateTime: ts(2 * time.Minute), Reason: "rollback to 1"},
	}})
	golden(t, "misc", b.Bytes())
}

// storeLost is control's answer when its etcd cluster has lost quorum.
var storeLost = apierror.New(codes.Unavailable, apierror.ReasonUnavailable, "",
	"the store has no leader: etcd has lost quorum (most of its members are down or cut off from each other) or is electing a leader, and control can neither read nor write until a majority of its members agree on one; check the etcd members ('etcdctl endpoint health --cluster') and control's log (store: get namespace demo/app: etcdserver: no leader)")

// fromServer is e as the producer client reads it from control's answer:
// the gRPC status e becomes on the wire, decoded.
func fromServer(e *apierror.Error) *apierror.Error {
	return apierror.FromError(e.GRPCStatus().Err())
}

// TestReportErrorUnavailableAdvice checks that "is control running?" is
// said only when no control answered, and that a control which answered
// UNAVAILABLE, its store lost, is not sent for: the user hears where the
// fault is and, for a write, how to learn whether it was committed.
func TestReportErrorUnavailableAdvice(t *testing.T) {
	// A real refused connection: a port nothing listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := producer.New(producer.Options{Address: addr, Retry: producer.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, refused := c.Publish(ctx, "demo/app", []producer.Property{{Key: "k", Value: []byte("v")}})
	if !errors.Is(refused, producer.ErrUnavailable) {
		t.Fatalf("publish to %s with nothing listening = %v; want UNAVAILABLE", addr, refused)
	}

	ec := errorContext{ns: "demo/app", control: addr, write: "publish"}
	for _, tc := range []struct {
		name     string
		err      error
		want     []string
		dontWant []string
	}{
		{"connection refused", refused,
			[]string{"is control running at " + addr + "?"},
			[]string{"store", "request_id", "lehr history"}},
		{"control answered: store lost", fmt.Errorf("producer: publish demo/app: %w", fromServer(storeLost)),
			[]string{"lost quorum", "control at " + addr + " is running", "check 'lehr history demo/app'"},
			[]string{"is control running", "Start one", "request_id"}},
	} {
		var b bytes.Buffer
		if code := reportError(&env{stderr: &b}, "lehr push", tc.err, ec); code != exitError {
			t.Errorf("%s: reportError = %d, want %d", tc.name, code, exitError)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: reportError printed\n%s\nwant it to say %q", tc.name, b.String(), w)
			}
		}
		for _, w := range tc.dontWant {
			if strings.Contains(b.String(), w) {
				t.Errorf("%s: reportError printed\n%s\nwant it not to say %q", tc.name, b.String(), w)
			}
		}
	}
}

func TestReportErrorGolden(t *testing.T) {
	var b bytes.Buffer
	e := &env{stderr: &b}
	ec := errorContext{ns: "demo/app", control: "127.0.0.1:7400"}

	conflict := apierror.New(codes.FailedPrecondition, apierror.ReasonStaleVersion, "base_version", "base version 2 is not the latest version of demo/app")
	conflict.CurrentVersion = 5
	withHint := ec
	withHint.conflictHint = func(latest uint64) string {
		return fmt.Sprintf("re-read with `lehr get demo/app` and retry with --base %d", latest)
	}
	if code := reportError(e, "lehr patch", fmt.Errorf("producer: patch demo/app@2: %w", conflict), withHint); code != exitError {
		t.Errorf("reportError code = %d, want %d", code, exitError)
	}

	tooLarge := apierror.New(codes.ResourceExhausted, apierror.ReasonValueTooLarge, "properties[1].value", "value of blob is 600000 bytes").WithLimit("524288 bytes")
	withKeys := ec
	withKeys.lists = map[string][]string{"properties": {"a", "blob"}}
	fmt.Fprintln(&b)
	reportError(e, "lehr push", fmt.Errorf("producer: publish demo/app: %w", tooLarge), withKeys)

	fmt.Fprintln(&b)
	reportError(e, "lehr get", apierror.New(codes.Unavailable, "", "", "connection refused"), ec)

	fmt.Fprintln(&b)
	push := ec
	push.write = "publish"
	reportError(e, "lehr push", fmt.Errorf("producer: publish demo/app: %w", fromServer(storeLost)), push)

	fmt.Fprintln(&b)
	reportError(e, "lehr push", apierror.New(codes.NotFound, apierror.ReasonNotFound, "namespace", "domain nosuch does not exist"), ec)

	fmt.Fprintln(&b)
	reportError(e, "lehr push", fmt.Errorf("read x.json: no such file"), ec)
	golden(t, "errors", b.Bytes())
}
