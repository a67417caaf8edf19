// Package services counts the services of the consumers holding leases
// on a namespace (SubscribeRequest.service): an agent per namespace, a
// distributor per namespace and version in its zone report, control per
// zone — who uses which configuration, as operators see it. It bounds and
// checks those lists the same way at every hop.
//
// Imported by agent, control/console, control/service, distributor and
// internal/wire.
package services

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Max bounds the services a NamespaceReport (an agent's, per
// namespace) and a zone report's VersionCount (a distributor's, per
// namespace and version) list: the most consumers first. Consumers of the
// rest count only in the total.
const Max = 16

// Top lists the services of counts (consumers per service), most
// consumers first and by name among equals, at most Max; nil for
// none.
func Top(counts map[string]int) []*lehrpb.ServiceConsumers {
	if len(counts) == 0 {
		return nil
	}
	out := make([]*lehrpb.ServiceConsumers, 0, len(counts))
	for s, n := range counts {
		out = append(out, &lehrpb.ServiceConsumers{Service: s, Consumers: uint32(min(max(n, 0), math.MaxUint32))})
	}
	slices.SortFunc(out, func(a, b *lehrpb.ServiceConsumers) int {
		if c := cmp.Compare(b.GetConsumers(), a.GetConsumers()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetService(), b.GetService())
	})
	return out[:min(len(out), Max)]
}

// Validate checks a list of services (NamespaceReport.services,
// VersionCount.services) of consumers in all: at most Max, each
// named by the service grammar and once, their consumers summing to at
// most consumers.
func Validate(field string, svcs []*lehrpb.ServiceConsumers, consumers uint32) error {
	if len(svcs) > Max {
		return fmt.Errorf("%s: %d services, at most %d allowed", field, len(svcs), Max)
	}
	seen := make(map[string]bool, len(svcs))
	var sum uint64
	for i, s := range svcs {
		if err := names.Service(s.GetService()); err != nil {
			return fmt.Errorf("%s[%d].service: %w", field, i, err)
		}
		if seen[s.GetService()] {
			return fmt.Errorf("%s[%d].service: %q listed twice", field, i, s.GetService())
		}
		seen[s.GetService()] = true
		sum += uint64(s.GetConsumers())
	}
	if sum > uint64(consumers) {
		return fmt.Errorf("%s: %d consumers of services listed, more than the %d holding leases", field, sum, consumers)
	}
	return nil
}
