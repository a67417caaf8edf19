package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestWriteZoneStatusGolden(t *testing.T) {
	vc := func(ns string, v uint64, n int32) *lehrpb.VersionCount {
		return &lehrpb.VersionCount{Namespace: ns, Version: v, Agents: n}
	}
	st := &lehrpb.GetZoneStatusResponse{
		Zone: "zone-a",
		Distributors: []*lehrpb.DistributorStatus{
			{DistributorId: "zone-a-dist-0", Agents: 2, Versions: []*lehrpb.VersionCount{vc("demo/app", 2, 1), vc("demo/app", 3, 1), vc("demo/banner", 1, 2)}},
			{DistributorId: "zone-a-dist-1", Agents: 1, Versions: []*lehrpb.VersionCount{vc("demo/app", 3, 1)}},
			{DistributorId: "zone-a-dist-2", Agents: 0},
		},
		Versions: []*lehrpb.VersionCount{vc("demo/app", 2, 1), vc("demo/app", 3, 2), vc("demo/banner", 1, 2)},
	}
	goals := map[string]uint64{"demo/app": 3}
	var b bytes.Buffer
	writeZoneStatus(&b, st, goals, true)
	b.WriteString("--- without goals\n")
	writeZoneStatus(&b, st, nil, false)
	b.WriteString("--- nobody reporting\n")
	writeZoneStatus(&b, &lehrpb.GetZoneStatusResponse{Zone: "zone-b"}, nil, true)
	golden(t, "zone-status", b.Bytes())
}

// A control plane that predates GetZoneStatus gets a clear message, not a
// raw gRPC error.
func TestZonesStatusUnimplemented(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	lehrpb.RegisterControlServer(srv, struct {
		lehrpb.UnimplementedControlServer
	}{})
	go srv.Serve(l)
	defer srv.Stop()
	code, stdout, stderr := runCLI(t, nil, "zones", "status", "zone-a", "--control", l.Addr().String())
	if code != exitError {
		t.Errorf("exit code %d, want %d (stdout %q)", code, exitError, stdout)
	}
	want := "lehr zones: control at " + l.Addr().String() + " does not implement GetZoneStatus (it is older than this lehr); upgrade control, or use 'lehr goals zone-a'"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want it to contain %q", stderr, want)
	}
}
