package agent_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/distributor/fanout"
	"lehr.dev/lehr/distributor/versions"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/nsfile"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A distributor that alters what control published — the content with a
// recomputed checksum, the author, the version number, and (issue 28,
// item 5) the message, the namespace's kind or what a rollback
// republishes, each keeping control's signature — is refused by an agent
// that trusts control's key: the altered version is never applied or
// written, the refusal is counted and reported, and the agent fails over
// to an honest distributor. The namespace file carries the signature,
// which a reader verifies.
func TestTamperingDistributorIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(v *content.Version)
	}{
		{"content", func(v *content.Version) {
			snap, err := content.New([]content.Property{{Key: "limit", Value: []byte("999999")}})
			if err != nil {
				t.Fatal(err)
			}
			v.Content, v.Checksum = snap, snap.Checksum()
			v.Info.Checksum = v.Checksum
		}},
		{"author", func(v *content.Version) { v.Info.Author = "mallory" }},
		{"version", func(v *content.Version) { v.Seq += 10; v.Info.Seq = v.Seq }},
		{"message", func(v *content.Version) { v.Info.Message = "approved by security" }},
		{"kind", func(v *content.Version) { v.Kind = lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY }},
		{"rollback_of", func(v *content.Version) { v.Info.RollbackOf = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1)
			ns := domain + "/signed"
			v1 := h.publish(ns, map[string]string{"limit": "100"})

			// The tampering distributor: a real fan-out server, fed the
			// version control signed, altered, with the zone's genuine
			// signed goal: only the version's own signature can catch it.
			goals, err := h.ctl.Client.GetGoals(ctx(t), &lehrpb.GetGoalsRequest{Zone: zone, Namespace: ns})
			if err != nil || len(goals.GetGoals()) != 1 {
				t.Fatalf("GetGoals: %v, %v", goals, err)
			}
			bad := fetchVersion(t, h, ns, v1.GetSeq())
			tc.tamper(bad)
			evil := serveVersion(t, h, "evil", bad, signing.GoalProof(goals.GetGoals()[0]))

			trusted := signing.NewVerifier(h.ctl.Control.SigningPublicKey())
			r := h.startAgent(dataDir(t), append([]string{evil.Addr().String()}, h.addrs()...), func(o *agent.Options) { o.TrustedKeys = trusted })
			sub := subscribe(t, r, ns)
			waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"limit": "100"})
			if got := counter(r, "lehr_agent_untrusted_updates_total"); got == 0 {
				t.Errorf("lehr_agent_untrusted_updates_total = 0; the tampered update was never refused (did the agent reach the evil distributor first?)")
			}
			if got := counter(r, "lehr_agent_failovers_total"); got == 0 {
				t.Errorf("no failover counted")
			}
			file, err := nsfile.Read(sub.GetPath())
			if err != nil {
				t.Fatal(err)
			}
			if pv, err := trusted.Verify(file.Info(), file.Kind); err != nil || pv != signing.PayloadV2 {
				t.Errorf("the namespace file's signature: payload %d, %v; want %d", pv, err, signing.PayloadV2)
			}
			if p, _ := file.Content.Get("limit"); file.Author == "mallory" || strings.Contains(string(p.Value), "999999") ||
				file.Message != "test" || file.Kind != lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG || file.RollbackOf != 0 {
				t.Errorf("the tampered version was served: %+v", file)
			}
			wait.For(t, "the refusal in the agent's report", func() bool {
				st, err := h.ctl.Client.GetZoneStatus(ctx(t), &lehrpb.GetZoneStatusRequest{Zone: zone})
				if err != nil {
					t.Fatal(err)
				}
				for _, hr := range st.GetHosts() {
					if hr.GetHostId() == host && hr.GetReport().GetNamespace() == ns && hr.GetReport().GetUntrustedUpdates() > 0 {
						return true
					}
				}
				return false
			})
		})
	}
}

// An agent refuses a version signed by a key it does not trust (a key
// revoked from its trusted keys, or another control's): the version never
// reaches its file.
func TestUntrustedKeyIsRefused(t *testing.T) {
	h := newHarness(t, 1)
	trusted := signing.NewVerifier(h.ctl.Control.SigningPublicKey())
	if len(trusted.KeyIDs()) != 1 {
		t.Fatalf("control signs with %v", trusted.KeyIDs())
	}
	unsigned := signing.NewVerifier() // trusts no key: control's is unknown
	ns := domain + "/strict"
	v1 := h.publish(ns, map[string]string{"a": "1"})
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) { o.TrustedKeys = unsigned })
	sub := subscribe(t, r, ns)
	wait.For(t, "the update refused", func() bool { return counter(r, "lehr_agent_untrusted_updates_total") > 0 })
	if _, err := os.Stat(sub.GetPath()); !os.IsNotExist(err) {
		t.Errorf("a namespace file exists for an untrusted version %d: %v", v1.GetSeq(), err)
	}
	if _, err := os.Stat(filepath.Join(h.ctl.DataDir, "signing.pub")); err != nil {
		t.Errorf("control did not write its public key: %v", err)
	}
}

// fetchVersion reads version seq of ns from control as a distributor
// would, signature included.
func fetchVersion(t *testing.T, h *harness, ns string, seq uint64) *content.Version {
	t.Helper()
	resp, err := h.ctl.Client.FetchVersion(ctx(t), &lehrpb.FetchVersionRequest{Namespace: ns, Version: seq})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := content.New(content.FromProto(resp.GetProperties()))
	if err != nil {
		t.Fatal(err)
	}
	return &content.Version{Namespace: ns, Seq: seq, Checksum: snap.Checksum(), Kind: resp.GetKind(), Info: proto.CloneOf(resp.GetVersion()), Content: snap}
}

// serveVersion runs a real fan-out server of the test's zone that serves v
// as the goal of its namespace, with proof as its signed goal (nil: none),
// until the test ends.
func serveVersion(t *testing.T, h *harness, id string, v *content.Version, proof *lehrpb.GoalState) *fanout.Server {
	t.Helper()
	vers := versions.New(versions.Options{})
	if err := vers.Put(v); err != nil {
		t.Fatal(err)
	}
	vers.Pin(v.Namespace, v.Seq)
	srv, err := fanout.Listen(fanout.Options{Listen: "127.0.0.1:0", TLS: h.tls("distributor", pki.Server), Zone: zone, DistributorID: id, Versions: vers,
		Logger: controltest.Logger(t, slog.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	t.Cleanup(func() { srv.Close(); stop(); <-done })
	srv.SetGoal(fanout.Goal{Stable: v, Proof: proof})
	return srv
}

// A distributor that delivers genuine, control-signed versions, but not
// what control decided for the host, is refused by an agent that
// verifies: each update must come with a goal signed by control that
// names its version for this host in this zone. Control's own key signs
// the test's goals: what is wrong with them is only what they say.
func TestGoalTamperingIsRefused(t *testing.T) {
	// Each case: control with version 1 and 2 of ns (the zone's goal at 2),
	// and the goal proof a distributor sends with version 2, made from
	// the zone's genuine goal g or signed with control's key sign.
	type env struct {
		v1, v2  *lehrpb.VersionInfo
		genuine *lehrpb.GoalState
		sign    func(g *lehrpb.GoalState) *lehrpb.GoalState
	}
	goalOf := func(e env, zone string, stable, candidate *lehrpb.VersionInfo, hosts ...string) *lehrpb.GoalState {
		g := &lehrpb.GoalState{Zone: zone, Namespace: stable.GetNamespace(), Version: stable.GetSeq(), Checksum: stable.GetChecksum()}
		if candidate != nil {
			g.Candidate = &lehrpb.CandidateGoal{Version: candidate.GetSeq(), Checksum: candidate.GetChecksum(), Hosts: hosts, Salt: "r2"}
		}
		return e.sign(g)
	}
	for _, tc := range []struct {
		name  string
		proof func(e env) *lehrpb.GoalState
		ok    bool
	}{
		{"the zone's genuine goal", func(e env) *lehrpb.GoalState { return signing.GoalProof(e.genuine) }, true},
		{"a candidate for this host", func(e env) *lehrpb.GoalState { return goalOf(e, zone, e.v1, e.v2, host) }, true},
		{"no goal", func(env) *lehrpb.GoalState { return nil }, false},
		{"a genuine goal altered", func(e env) *lehrpb.GoalState {
			p := signing.GoalProof(e.genuine)
			p.Candidate = &lehrpb.CandidateGoal{Version: e.v2.GetSeq(), Checksum: e.v2.GetChecksum(), Hosts: []string{host}}
			p.Version, p.Checksum = e.v1.GetSeq(), e.v1.GetChecksum()
			return p
		}, false},
		{"another zone's goal", func(e env) *lehrpb.GoalState { return goalOf(e, "zone-b", e.v2, nil) }, false},
		{"a candidate for other hosts", func(e env) *lehrpb.GoalState { return goalOf(e, zone, e.v1, e.v2, "host-9") }, false},
		{"a goal naming another version", func(e env) *lehrpb.GoalState { return goalOf(e, zone, e.v1, nil) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 0)
			ns := domain + "/goals"
			e := env{v1: h.publish(ns, map[string]string{"limit": "100"}), v2: h.publish(ns, map[string]string{"limit": "200"})}
			genuine, err := h.ctl.Client.GetGoals(ctx(t), &lehrpb.GetGoalsRequest{Zone: zone, Namespace: ns})
			if err != nil || len(genuine.GetGoals()) != 1 || genuine.GetGoals()[0].GetVersion() != e.v2.GetSeq() {
				t.Fatalf("GetGoals: %v, %v; want the zone's goal at version 2", genuine, err)
			}
			e.genuine = genuine.GetGoals()[0]
			ctlKey, err := signing.Load(filepath.Join(h.ctl.DataDir, "signing.key"))
			if err != nil {
				t.Fatal(err)
			}
			e.sign = func(g *lehrpb.GoalState) *lehrpb.GoalState {
				g.UpdateTime = e.genuine.GetUpdateTime()
				ctlKey.SignGoal(g)
				return signing.GoalProof(g)
			}

			// The distributor: a real fan-out server with control's genuine
			// version 2, and the goal proof of the case.
			dist := serveVersion(t, h, "goals", fetchVersion(t, h, ns, e.v2.GetSeq()), tc.proof(e))

			trusted := signing.NewVerifier(h.ctl.Control.SigningPublicKey())
			r := h.startAgent(dataDir(t), []string{dist.Addr().String()}, func(o *agent.Options) { o.TrustedKeys = trusted })
			sub := subscribe(t, r, ns)
			if tc.ok {
				waitFile(t, sub.GetPath(), e.v2.GetSeq(), map[string]string{"limit": "200"})
				if got := counter(r, "lehr_agent_untrusted_updates_total"); got != 0 {
					t.Errorf("lehr_agent_untrusted_updates_total = %v for an update its goal names", got)
				}
				return
			}
			wait.For(t, "the update refused", func() bool { return counter(r, "lehr_agent_untrusted_updates_total") > 0 })
			if _, err := os.Stat(sub.GetPath()); !os.IsNotExist(err) {
				t.Errorf("a namespace file exists for an update no signed goal named for this host: %v", err)
			}
		})
	}
}

// legacySign signs v as a control before payload v2 did
// (signing.LegacyPayload), with control's key from its data directory.
func legacySign(t *testing.T, h *harness, v *content.Version) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.ctl.DataDir, "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("signing.key holds no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key := k.(ed25519.PrivateKey)
	v.Info.Signature = ed25519.Sign(key, signing.LegacyPayload(v.Info))
	v.Info.SignatureKeyId = signing.KeyID(key.Public().(ed25519.PublicKey))
}

// Versions control signed before payload v2 — which covers neither the
// kind, the message nor rollback_of — still reach hosts (issue 28, item
// 5: old versions keep working), but an agent that verifies delivers only
// what their signature covers: the message and rollback_of a distributor
// may have changed never reach the file or the local API, and the update
// is counted in lehr_agent_legacy_signed_updates_total. The file's
// signature verifies, as the legacy payload.
func TestLegacySignedVersionDeliversOnlyWhatItsSignatureCovers(t *testing.T) {
	h := newHarness(t, 0)
	ns := domain + "/legacy"
	v1 := h.publish(ns, map[string]string{"limit": "100"})
	goals, err := h.ctl.Client.GetGoals(ctx(t), &lehrpb.GetGoalsRequest{Zone: zone, Namespace: ns})
	if err != nil || len(goals.GetGoals()) != 1 {
		t.Fatalf("GetGoals: %v, %v", goals, err)
	}
	old := fetchVersion(t, h, ns, v1.GetSeq())
	legacySign(t, h, old)
	old.Info.Message, old.Info.RollbackOf = "changed on the way", 1 // not covered by the legacy signature
	dist := serveVersion(t, h, "legacy", old, signing.GoalProof(goals.GetGoals()[0]))

	trusted := signing.NewVerifier(h.ctl.Control.SigningPublicKey())
	r := h.startAgent(dataDir(t), []string{dist.Addr().String()}, func(o *agent.Options) { o.TrustedKeys = trusted })
	sub := subscribe(t, r, ns)
	waitFile(t, sub.GetPath(), v1.GetSeq(), map[string]string{"limit": "100"})
	if got := counter(r, "lehr_agent_legacy_signed_updates_total"); got != 1 {
		t.Errorf("lehr_agent_legacy_signed_updates_total = %d, want 1", got)
	}
	file, err := nsfile.Read(sub.GetPath())
	if err != nil {
		t.Fatal(err)
	}
	if file.Message != "" || file.RollbackOf != 0 || file.Author != v1.GetAuthor() {
		t.Errorf("file message %q, rollback_of %d, author %q; want no message, no rollback_of and author %q", file.Message, file.RollbackOf, file.Author, v1.GetAuthor())
	}
	if pv, err := trusted.Verify(file.Info(), file.Kind); err != nil || pv != signing.PayloadV1 {
		t.Errorf("the file's legacy signature: payload %d, %v; want %d", pv, err, signing.PayloadV1)
	}
	got, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if info := got.GetVersion(); info.GetMessage() != "" || info.GetRollbackOf() != 0 || info.GetTransportIdentity() != "" || info.GetParent() != 0 {
		t.Errorf("the local API serves unsigned fields: %v", info)
	}
}
