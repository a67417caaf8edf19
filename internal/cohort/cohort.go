// Package cohort decides which hosts of a zone take a candidate version:
// the hosts named explicitly, plus a fraction of all hosts chosen by a hash
// of a salt (the rollout) and the host id. Every distributor of a zone, and
// control, compute the same answer without talking to each other; a larger
// fraction with the same salt keeps every host a smaller one selected.
package cohort

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Million is the denominator of PerMillion: 1,000,000 selects every host.
const Million = 1_000_000

// Cohort is a set of hosts.
type Cohort struct {
	// Hosts are selected by name.
	Hosts []string
	// PerMillion of all hosts are selected by Position.
	PerMillion uint32
	// Salt makes each rollout's sample independent of the others'.
	Salt string
}

// Position is host's place in the salt's sample, in [0, Million): the
// hosts with the lowest positions are the first selected.
func Position(salt, host string) uint32 {
	h := sha256.New()
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write([]byte(host))
	var sum [sha256.Size]byte
	return uint32(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]) % Million)
}

// Has reports whether host is in the cohort.
func (c Cohort) Has(host string) bool {
	if c.PerMillion >= Million || (c.PerMillion > 0 && Position(c.Salt, host) < c.PerMillion) {
		return true
	}
	return slices.Contains(c.Hosts, host)
}

// Empty reports whether the cohort selects no host.
func (c Cohort) Empty() bool { return len(c.Hosts) == 0 && c.PerMillion == 0 }
