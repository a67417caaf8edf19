package agent

import "lehr.dev/lehr/proto/lehrpb"

// Signals answers a distributor's SignalsRequest for ns
// (upstream.Handler). PENDING: wired to the agent's signal store
// (agent/signals) in the change that lands it; until then the agent keeps
// none and answers with no namespaces.
func (h *handler) Signals(ns string) *lehrpb.NamespaceSignals { return nil }
