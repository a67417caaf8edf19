package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/control/embedetcd"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func TestWriteControlStatusGolden(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	store := &lehrpb.StoreIdentity{Id: "5f3c0b6e9d2a47c1a8e4b7f0c3d2e1a9", CreateTime: ts(-90 * 24 * time.Hour)}
	st := &lehrpb.ControlStatus{
		Store: store, Replica: "ctl-b:7400", EtcdEndpoints: []string{"https://etcd-0:2379", "https://etcd-1:2379", "https://etcd-2:2379"},
		Etcd: &lehrpb.EtcdClusterStatus{ClusterId: "8e9e05c52164694d", Members: []string{"etcd-0", "etcd-1", "etcd-2"}, Leader: "etcd-1", Version: "3.5.17"},
		Replicas: []*lehrpb.ControlReplica{
			{Address: "ctl-a:7400", Version: "v0.9.0", StartTime: ts(-2 * time.Hour), LastSeenTime: ts(-time.Second)},
			{Address: "ctl-b:7400", Version: "v0.9.0", StartTime: ts(-30 * time.Minute), LastSeenTime: ts(-3 * time.Second)},
		},
		StrategistLeader: "ctl-a:7400",
	}
	var b bytes.Buffer
	writeControlStatus(&b, st, now)
	b.WriteString("--- the misconfigured replica: an embedded etcd, a store of its own\n")
	lone := &lehrpb.ControlStatus{
		Store: &lehrpb.StoreIdentity{Id: "a17e44d09b3c4f6e8c2d1b0a9f8e7d6c", CreateTime: ts(-10 * time.Minute)}, Replica: "ctl-c:7400", EmbeddedEtcd: true,
		Etcd:     &lehrpb.EtcdClusterStatus{ClusterId: "cdf818194e3a8c32", Members: []string{"lehr"}, Leader: "lehr", Version: "3.5.17"},
		Replicas: []*lehrpb.ControlReplica{{Address: "ctl-c:7400", Version: "v0.9.0", StartTime: ts(-10 * time.Minute), LastSeenTime: ts(0), EmbeddedEtcd: true}},
	}
	writeControlStatus(&b, lone, now)
	b.WriteString("--- a leader not registered\n")
	st.StrategistLeader = "ctl-old:7400"
	writeControlStatus(&b, st, now)
	b.WriteString("--- the warning of lehr control status --control ctl-a:7400,ctl-b:7400,ctl-c:7400\n")
	b.WriteString(storeSplit([]controlAnswer{{addr: "ctl-c:7400", st: lone}, {addr: "ctl-a:7400", st: st}, {addr: "ctl-b:7400", st: st},
		{addr: "ctl-d:7400", err: errors.New("down")}}))
	golden(t, "control-status", b.Bytes())
	if got := storeSplit([]controlAnswer{{addr: "a", st: st}, {addr: "b", st: st}}); got != "" {
		t.Errorf("two replicas of one store: warned %q", got)
	}
}

// statusJSON is the part of ControlStatus's JSON the test reads.
type statusJSON struct {
	Store struct {
		ID string `json:"id"`
	} `json:"store"`
	Replica          string `json:"replica"`
	StrategistLeader string `json:"strategist_leader"`
	Replicas         []struct {
		Address string `json:"address"`
	} `json:"replicas"`
}

// decodeStatuses decodes a stream of ControlStatus JSON objects.
func decodeStatuses(t *testing.T, out string) []statusJSON {
	t.Helper()
	var all []statusJSON
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var s statusJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		all = append(all, s)
	}
	return all
}

// Issue 29, items 6 and 7: "lehr control status" shows the replicas
// sharing a store, the strategist's leader and the store; asked of several
// replicas, it prints each answer, and says loudly — exit 1 — when one of
// them serves another store.
func TestControlStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := embedetcd.StartCluster(ctx, t.TempDir(), 1, controltest.Logger(t, slog.LevelError+4))
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { cluster.Close() })
	opts := control.Options{EtcdEndpoints: cluster.Endpoints(), Rollouts: true}
	a := controltest.StartControl(t, opts)
	b := controltest.StartControl(t, opts)
	lone := controltest.StartControl(t, control.Options{Rollouts: true}) // no --etcd-endpoints

	both := cli{t: t, addr: a.Addr + "," + b.Addr}
	var sts []statusJSON
	wait.Until(t, "both replicas to list both, with a leader", func() error {
		sts = decodeStatuses(t, both.ok("control", "status", "-o", "json"))
		for _, s := range sts {
			if len(s.Replicas) != 2 || s.StrategistLeader == "" {
				return fmt.Errorf("%s lists %v, led by %q", s.Replica, s.Replicas, s.StrategistLeader)
			}
		}
		return nil
	})
	if len(sts) != 2 || sts[0].Replica != a.Addr || sts[1].Replica != b.Addr || sts[0].Store.ID == "" || sts[0].Store.ID != sts[1].Store.ID ||
		sts[0].StrategistLeader != sts[1].StrategistLeader {
		t.Fatalf("answers %+v; want a's then b's, one store, one leader", sts)
	}
	storeID, leader := sts[0].Store.ID, sts[0].StrategistLeader

	out := cli{t: t, addr: a.Addr}.ok("control", "status")
	mustContain(t, "lehr control status", out, "store "+storeID, "in the external etcd at "+cluster.Endpoints()[0], "etcd cluster ", "1 member",
		"answered by "+a.Addr, "REPLICA", a.Addr, b.Addr, "leader", "external")
	if strings.Count(out, " leader ") != 1 {
		t.Errorf("lehr control status marks %d leaders, want 1:\n%s", strings.Count(out, " leader "), out)
	}
	if !strings.Contains(out, leader+"  leader") {
		t.Errorf("lehr control status does not mark %s the leader:\n%s", leader, out)
	}
	out = both.ok("control", "status")
	mustContain(t, "lehr control status, two replicas", out, "== control at "+a.Addr+" ==", "== control at "+b.Addr+" ==",
		"answered by "+b.Addr, "all 2 replicas asked serve store "+storeID)

	// The misconfigured replica: a store of its own, said loudly.
	split := cli{t: t, addr: a.Addr + "," + lone.Addr}
	code, stdout, stderr := split.run("", "control", "status")
	if code != exitError {
		t.Errorf("lehr control status across stores: exit %d, want %d\nstderr:\n%s", code, exitError, stderr)
	}
	mustContain(t, "lehr control status across stores (stdout)", stdout, "== control at "+lone.Addr+" ==", "in the etcd embedded in the replica that answered")
	mustContain(t, "lehr control status across stores (stderr)", stderr, "WARNING: these control replicas do not share one store",
		"replica at "+lone.Addr+" serves a different store", "than "+a.Addr+" ("+storeID+") — it is not configured with the --etcd-endpoints of the others",
		"LEHR_ETCD_ENDPOINTS")
	code, stdout, _ = cli{t: t, addr: a.Addr + "," + b.Addr + "," + lone.Addr}.run("", "control", "status", "-o", "json")
	if sts := decodeStatuses(t, stdout); code != exitError || len(sts) != 3 || sts[2].Store.ID == storeID || sts[2].Store.ID == "" {
		t.Errorf("-o json across stores: exit %d, answers %+v; want 1 and three answers, the third of another store", code, sts)
	}

	// A replica that does not answer: the others are still shown.
	code, stdout, stderr = cli{t: t, addr: a.Addr + ",127.0.0.1:1"}.run("", "control", "status", "--timeout", "3s")
	if code != exitError || !strings.Contains(stdout, "answered by "+a.Addr) || !strings.Contains(stderr, "control at 127.0.0.1:1") {
		t.Errorf("one replica down: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, a's answer and an error naming the other", code, stdout, stderr)
	}
}

// lehr control takes --etcd-endpoints from LEHR_ETCD_ENDPOINTS, as the
// systemd unit's settings file says (issue 29, item 7); the flag wins. Its
// TLS files come from LEHR_ETCD_CA, _CERT and _KEY (issue 33, item 5).
func TestControlEtcdEndpointsFromEnvironment(t *testing.T) {
	env := map[string]string{"LEHR_ETCD_ENDPOINTS": "http://10.1.2.3:2379"}
	// --keep-last 0 is refused after the endpoints are checked: either
	// way control does not start.
	code, _, stderr := runCLI(t, env, "control", "--data-dir", t.TempDir(), "--keep-last", "0")
	if code != exitUsage || !strings.Contains(stderr, "etcd endpoint http://10.1.2.3:2379 is plaintext and not on loopback") {
		t.Errorf("LEHR_ETCD_ENDPOINTS=http://10.1.2.3:2379 lehr control: exit %d, stderr %q; want the endpoint checked (and refused)", code, stderr)
	}
	code, _, stderr = runCLI(t, env, "control", "--data-dir", t.TempDir(), "--etcd-endpoints", "", "--keep-last", "0")
	if code != exitUsage || strings.Contains(stderr, "10.1.2.3") || !strings.Contains(stderr, "--keep-last 0") {
		t.Errorf("--etcd-endpoints \"\" over the environment: exit %d, stderr %q; want the flag to win", code, stderr)
	}
	// Its TLS files come from the environment too (the unit passes no
	// flags for them): here they do not exist, and control says so.
	ca := filepath.Join(t.TempDir(), "etcd-ca.crt")
	env = map[string]string{"LEHR_ETCD_ENDPOINTS": "https://10.1.2.3:2379", "LEHR_ETCD_CA": ca,
		"LEHR_ETCD_CERT": ca + ".cert", "LEHR_ETCD_KEY": ca + ".key"}
	code, _, stderr = runCLI(t, env, "control", "--data-dir", t.TempDir(), "--keep-last", "0")
	if code != exitError || !strings.Contains(stderr, "etcd TLS") {
		t.Errorf("LEHR_ETCD_CA, _CERT and _KEY naming missing files: exit %d, stderr %q; want them read (and refused)", code, stderr)
	}
	env = map[string]string{"LEHR_ETCD_CA": ca}
	code, _, stderr = runCLI(t, env, "control", "--data-dir", t.TempDir(), "--keep-last", "0")
	if code != exitUsage || !strings.Contains(stderr, "pass --etcd-ca, --etcd-cert and --etcd-key together") {
		t.Errorf("LEHR_ETCD_CA alone: exit %d, stderr %q; want it read and refused without the other two", code, stderr)
	}
	_, stdout, _ := runCLI(t, nil, "control", "--help")
	mustContain(t, "lehr control --help", stdout, "(env LEHR_ETCD_ENDPOINTS)", "(env LEHR_ETCD_CA)", "(env LEHR_ETCD_CERT)", "(env LEHR_ETCD_KEY)", "lehr control status")
}
