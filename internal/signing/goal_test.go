package signing_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/signing"
	"lehr.dev/lehr/proto/lehrpb"
)

func sum(b string) string { return "sha256:" + strings.Repeat(b, 32) }

func ref(seq uint64, sum string) content.Ref { return content.Ref{Seq: seq, Checksum: sum} }

// goal is zone-a's goal of pay/limits: version 7 for every host, version
// 8 for the cohort of host-2 by name.
func goal() *lehrpb.GoalState {
	return &lehrpb.GoalState{Zone: "zone-a", Namespace: "pay/limits", Version: 7, Checksum: sum("07"),
		UpdateTime: timestamppb.New(time.Unix(1_800_000_000, 5)), Reason: "not signed",
		Candidate: &lehrpb.CandidateGoal{Version: 8, Checksum: sum("08"), Hosts: []string{"host-2"}, Salt: "r8",
			Sample: 3, Analysis: 2}}
}

// A signed goal sanctions what it names for whom it names it and nothing
// else; each signed field changed after signing breaks the signature.
func TestVerifyGoal(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := signing.NewSigner(key)
	v := signing.NewVerifier(pub)
	signed := func(edit func(g *lehrpb.GoalState)) *lehrpb.GoalState {
		g := goal()
		if edit != nil {
			edit(g)
		}
		s.SignGoal(g)
		return signing.GoalProof(g)
	}
	for _, tc := range []struct {
		name       string
		g          *lehrpb.GoalState
		zone, host string
		ref        content.Ref
		want       error
	}{
		{"the zone's version", signed(nil), "zone-a", "host-1", ref(7, sum("07")), nil},
		{"the candidate for a named host", signed(nil), "zone-a", "host-2", ref(8, sum("08")), nil},
		{"the candidate for a host in the sampled share", signed(func(g *lehrpb.GoalState) { g.Candidate.PerMillion = 1_000_000 }), "zone-a", "host-1", ref(8, sum("08")), nil},
		{"the candidate for a host outside the cohort", signed(nil), "zone-a", "host-1", ref(8, sum("08")), signing.ErrNotSanctioned},
		{"a version no goal names", signed(nil), "zone-a", "host-1", ref(6, sum("06")), signing.ErrNotSanctioned},
		{"the version with another checksum", signed(nil), "zone-a", "host-1", ref(7, sum("99")), signing.ErrNotSanctioned},
		{"another zone's goal", signed(nil), "zone-b", "host-1", ref(7, sum("07")), signing.ErrNotSanctioned},
		{"no goal", nil, "zone-a", "host-1", ref(7, sum("07")), signing.ErrUnsigned},
		{"an unsigned goal", goal(), "zone-a", "host-1", ref(7, sum("07")), signing.ErrUnsigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.VerifyGoal(tc.g, tc.zone, tc.host, "pay/limits", tc.ref)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("VerifyGoal: %v; want %v", err, tc.want)
			}
		})
	}
	if err := v.VerifyGoal(signed(nil), "zone-a", "host-1", "pay/other", ref(7, sum("07"))); !errors.Is(err, signing.ErrNotSanctioned) {
		t.Errorf("another namespace's goal: %v; want ErrNotSanctioned", err)
	}

	for _, tc := range []struct {
		field  string
		tamper func(g *lehrpb.GoalState)
	}{
		{"zone", func(g *lehrpb.GoalState) { g.Zone = "zone-b" }},
		{"namespace", func(g *lehrpb.GoalState) { g.Namespace = "pay/other" }},
		{"version", func(g *lehrpb.GoalState) { g.Version = 6 }},
		{"checksum", func(g *lehrpb.GoalState) { g.Checksum = sum("06") }},
		{"update_time", func(g *lehrpb.GoalState) { g.UpdateTime = timestamppb.New(time.Unix(1_900_000_000, 0)) }},
		{"candidate.version", func(g *lehrpb.GoalState) { g.Candidate.Version = 9 }},
		{"candidate.checksum", func(g *lehrpb.GoalState) { g.Candidate.Checksum = sum("09") }},
		{"candidate.hosts", func(g *lehrpb.GoalState) { g.Candidate.Hosts = append(g.Candidate.Hosts, "host-1") }},
		{"candidate.per_million", func(g *lehrpb.GoalState) { g.Candidate.PerMillion = 1_000_000 }},
		{"candidate.salt", func(g *lehrpb.GoalState) { g.Candidate.Salt = "r9" }},
		{"candidate removed", func(g *lehrpb.GoalState) { g.Candidate = nil }},
	} {
		t.Run("tampered "+tc.field, func(t *testing.T) {
			g := signed(nil)
			tc.tamper(g)
			if err := v.VerifyGoal(g, g.GetZone(), "host-1", g.GetNamespace(), ref(g.GetVersion(), g.GetChecksum())); !errors.Is(err, signing.ErrBadSignature) {
				t.Fatalf("VerifyGoal after changing %s: %v; want ErrBadSignature", tc.field, err)
			}
		})
	}

	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := signing.NewVerifier(other).VerifyGoal(signed(nil), "zone-a", "host-1", "pay/limits", ref(7, sum("07"))); !errors.Is(err, signing.ErrUnknownKey) {
		t.Errorf("a goal signed by an untrusted key: %v; want ErrUnknownKey", err)
	}

	// The proof keeps what is signed and drops what is not.
	g := goal()
	s.SignGoal(g)
	p := signing.GoalProof(g)
	if p.GetReason() != "" || p.GetCandidate().GetSample() != 0 || p.GetCandidate().GetAnalysis() != 0 {
		t.Errorf("GoalProof kept unsigned fields: %v", p)
	}
	g.Reason, g.Candidate.Sample = "changed", 9
	if !proto.Equal(signing.GoalProof(g), p) {
		t.Errorf("unsigned fields changed the proof")
	}
}

// What signed goals cost: control signs each goal it writes, an agent
// verifies the goal with every update (bench/RESULTS.md, "Signing"), and
// the proof adds its encoded size to every update frame.
func BenchmarkSignGoal(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	s := signing.NewSigner(key)
	g := goal()
	for b.Loop() {
		s.SignGoal(g)
	}
}

func BenchmarkVerifyGoal(b *testing.B) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	s := signing.NewSigner(key)
	v := signing.NewVerifier(pub)
	g := goal()
	s.SignGoal(g)
	p := signing.GoalProof(g)
	for b.Loop() {
		if err := v.VerifyGoal(p, "zone-a", "host-2", "pay/limits", ref(8, sum("08"))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(proto.Size(&lehrpb.Update{Goal: p})), "update-bytes")
}
