package bench

// What it would take: for every target the current runs miss, what bounds
// it and the section of RESULTS.md that holds its profile, printed beside
// the row by WriteTargetTable.

import "strings"

// MissedNote says what bounds a target that is not met and links to the
// section of RESULTS.md that holds its profile.
type MissedNote struct {
	// Scenario is the scenario that checks the target.
	Scenario string
	// Goal is a distinctive substring of the target's Goal.
	Goal string
	// Note is a short Markdown sentence (about 25 words at most) naming
	// what bounds the row, with a link to its section of RESULTS.md
	// ("[the QUIC floor](#the-quic-floor)").
	Note string
}

// MissedNotes holds the note of every missed target, the more specific
// first: a target takes the first note whose scenario is its own and
// whose Goal its goal contains. A note whose row becomes met stays until
// the row's goal goes; WriteTargetTable prints it only for a missed row.
var MissedNotes = []MissedNote{
	{"fanout", "p99 no slower than",
		"p99 follows CPU per delivery on 2 saturated cores: quic-go's per-packet cost, and Lehr's simulated agents decoding, verifying and applying beside the distributor ([fan-out on the whole machine](#fan-out-on-the-whole-machine))"},
	{"fanout", "per connected agent (RSS",
		"quic-go and crypto/tls keep ≈ 10 KiB per connection after the handshake (its buffers, a TLS AEAD QUIC never uses): released upstream, it would be under 48 ([memory per agent](#memory-per-agent))"},
	{"fairrace", "N=10000, fair race: no missed or duplicated update",
		"10,000 simulated agents share one subscriber core; with 1 s keepalives they fell behind and missed 3,866 ([the fair race at 10,000 agents](#the-fair-race-at-10000-agents))"},
	{"fairrace", "lehr server cpu/delivery <= the best peer's",
		"quic-go alone costs 40–61 µs per delivery at N=1,000, as much as NATS's whole server (30–43 µs) or more; Lehr's own code is 7–10 µs ([the QUIC floor](#the-quic-floor))"},
	{"fairrace", "lehr p99 <= the best peer's",
		"quic-go's own cost per delivery is above NATS's whole server, and the subscribers' core (decode, verify, apply) bounds p99 ([the QUIC floor](#the-quic-floor))"},
	{"storm", "converged within 15 s",
		"the redial spread (10,000 ÷ --redial-rate 500 = 20 s) on 2 cores shared by the distributor and 10,000 simulated agents' handshakes ([the storm](#the-storm))"},
	{"footprint", "holding 100 namespaces",
		"about 19 MiB of it are the agent binary's own resident pages (clean, shared, reclaimable); its anonymous memory is about 11 MiB ([footprint](#footprint))"},
	{"bighost", "peak RSS <= 256 MiB",
		"VmHWM counts Badger's mapped value log (reclaimable page cache); anonymous memory (107 MiB) and the 256 MiB cgroup run are met ([big host memory](#big-host-memory))"},
}

// missedNote returns the note of MissedNotes for t, "" if none has one.
func missedNote(t CurrentTarget) string {
	for _, n := range MissedNotes {
		if n.Scenario == t.Scenario && strings.Contains(t.Goal, n.Goal) {
			return n.Note
		}
	}
	return ""
}
