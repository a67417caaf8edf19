package wire

import (
	"fmt"
	"slices"

	"lehr.dev/lehr/proto/lehrpb"
)

// VersionRange is a range of protocol versions one side speaks, inclusive.
type VersionRange struct {
	Min, Max uint32
}

// Supported is the range this package speaks.
func Supported() VersionRange {
	return VersionRange{Min: MinProtocolVersion, Max: ProtocolVersion}
}

// Negotiate is the distributor's side of version negotiation with the range
// this package speaks: Supported().Negotiate(hello).
func Negotiate(hello *lehrpb.Hello) (uint32, error) {
	return Supported().Negotiate(hello)
}

// Negotiate chooses the protocol version for a connection: the highest
// version in both r and the Hello's [min_protocol_version,
// protocol_version] (a zero min_protocol_version means protocol_version).
// With no common version it returns an error wrapping
// ErrUnsupportedVersion; the distributor then closes the connection with
// CodeUnsupportedVersion.
func (r VersionRange) Negotiate(hello *lehrpb.Hello) (uint32, error) {
	if hello == nil || hello.GetProtocolVersion() == 0 {
		return 0, fmt.Errorf("%w: Hello.protocol_version is 0", ErrUnsupportedVersion)
	}
	peer := VersionRange{Min: hello.GetMinProtocolVersion(), Max: hello.GetProtocolVersion()}
	if peer.Min == 0 {
		peer.Min = peer.Max
	}
	v := min(r.Max, peer.Max)
	if v < max(r.Min, peer.Min) {
		return 0, fmt.Errorf("%w: agent speaks %d-%d, distributor %d-%d", ErrUnsupportedVersion, peer.Min, peer.Max, r.Min, r.Max)
	}
	return v, nil
}

// Accept is the agent's check of a Welcome: the chosen version must be in
// r (the range the agent announced). It returns an error wrapping
// ErrUnsupportedVersion otherwise.
func (r VersionRange) Accept(w *lehrpb.Welcome) error {
	v := w.GetProtocolVersion()
	if v < r.Min || v > r.Max {
		return fmt.Errorf("%w: distributor chose %d, agent speaks %d-%d", ErrUnsupportedVersion, v, r.Min, r.Max)
	}
	return nil
}

// CommonCapabilities returns the capabilities both sides listed, sorted
// and without duplicates: what a distributor puts in Welcome.capabilities
// given the Hello's and its own. Neither side may use a capability outside
// this set.
func CommonCapabilities(offered, supported []string) []string {
	var out []string
	for _, c := range offered {
		if c != "" && slices.Contains(supported, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
