package store

import (
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key layout, all under Options.Prefix (docs/design.md, "Storage in etcd"):
//
//	domains/<domain>                          lehrpb.Domain
//	nsmeta/<domain>/<name>                    lehrpb.Namespace, the head
//	data/<domain>/<name>/v/<seq %020d>        lehrpb.VersionRecord
//	data/<domain>/<name>/b/<sha256 hex>       blob: a value or an encoded lehrpb.ManifestChunk
//	zones/<zone>                              lehrpb.Zone
//	goals/<zone>/<domain>/<name>              lehrpb.GoalState
//	zonestatus/<zone>/<distributor_id>        lehrpb.DistributorStatus, under a lease
//	zonereports/<zone>/<id hash>/index        lehrpb.ZoneReportIndex, a large report's parts, under its lease
//	zonereports/<zone>/<id hash>/p/<sha256>   lehrpb.ZoneReportPart, under the report's lease
//	zonereported/<zone>                       google.protobuf.Timestamp, when a distributor last reported (to a minute)
//	requests/<domain>/<name>/<request_id>     lehrpb.RequestRecord, under a lease
//	policies/domain/<domain>                  lehrpb.RolloutPolicyRecord, a domain's default
//	policies/ns/<domain>/<name>               lehrpb.RolloutPolicyRecord, a namespace's override
//	policyhist/domain/<domain>/<gen %020d>    lehrpb.RolloutPolicyRecord, every change
//	policyhist/ns/<domain>/<name>/<gen %020d>
//	rollouts/<domain>/<name>/<version %020d>  lehrpb.Rollout
//	rolloutevents/<domain>/<name>/<version %020d>/<seq %06d>  lehrpb.RolloutEvent
//	rolloutcmds/<domain>/<name>/<version %020d>  lehrpb.RolloutCommand, until carried out
//	evaluations/<domain>/<name>/<version %020d>/<evaluation name>  lehrpb.CanaryEvaluation
//	experiments/<domain>/<name>/<experiment id>  lehrpb.PolicyExperiment
//	experimenthist/<domain>/<name>/<experiment id>  lehrpb.PolicyExperimentHistoryRecord, its sampled counts (experimenthist.go)
//	usage/<domain>                            lehrpb.DomainUsageRecord, stored bytes and the publish token bucket
//	audit/<unix nanoseconds %020d>-<random>   lehrpb.AuditRecord, under a lease of the audit retention
//	identity                                  lehrpb.StoreIdentity, made once (identity.go)
//	backup                                    lehrpb.BackupRecord, the last backup's time (restore.go)
//	restore                                   lehrpb.RestoreRecord, the last restore and its version floor (restore.go)
//	replicas/<address>                        lehrpb.ControlReplica, under the replica's lease (replicas.go)
//	strategist/<lease hex>                    the strategist's election (etcd's concurrency.Election), value a replica's address
//	propagation                               lehrpb.PropagationRecord, the recent updates' propagation (propagation.go)
//	tombstones/ns/<domain>/<name>             lehrpb.Tombstone, a deleted namespace's last version (delete.go)
//	tombstones/domain/<domain>                lehrpb.Tombstone, a deleted domain's
//
// Names are validated (package names) before they become keys, so no name
// contains "/" beyond the one in "domain/name" and prefixes never overlap.
// A distributor id is free-form (1 to MaxDistributorIDBytes bytes) but is
// always the last element of its key, as is a request id (printable ASCII,
// checked by the service). See zonestatus.go and requests.go for the leases.
type layout struct{ prefix string }

func (l layout) domainsPrefix() string        { return l.prefix + "domains/" }
func (l layout) domain(d string) string       { return l.domainsPrefix() + d }
func (l layout) nsmetaPrefix() string         { return l.prefix + "nsmeta/" }
func (l layout) nsmetaDomain(d string) string { return l.nsmetaPrefix() + d + "/" }
func (l layout) nsmeta(ns string) string      { return l.nsmetaPrefix() + ns }
func (l layout) versionsPrefix(ns string) string {
	return l.prefix + "data/" + ns + "/v/"
}
func (l layout) version(ns string, seq uint64) string {
	return fmt.Sprintf("%s%020d", l.versionsPrefix(ns), seq)
}
func (l layout) requestsPrefix(ns string) string { return l.prefix + "requests/" + ns + "/" }
func (l layout) request(ns, id string) string    { return l.requestsPrefix(ns) + id }
func (l layout) blobsPrefix(ns string) string    { return l.prefix + "data/" + ns + "/b/" }
func (l layout) blob(ns, hash string) string     { return l.blobsPrefix(ns) + hash }

// policyScopePath is "domain/<d>" or "ns/<d>/<n>": the two kinds of scope
// under distinct prefixes, so no listing of one overlaps another.
func policyScopePath(scope string) string {
	if strings.Contains(scope, "/") {
		return "ns/" + scope
	}
	return "domain/" + scope
}
func (l layout) policy(scope string) string { return l.prefix + "policies/" + policyScopePath(scope) }
func (l layout) policyHistoryPrefix(scope string) string {
	return l.prefix + "policyhist/" + policyScopePath(scope) + "/"
}
func (l layout) policyHistory(scope string, gen uint64) string {
	return fmt.Sprintf("%s%020d", l.policyHistoryPrefix(scope), gen)
}
func (l layout) rolloutsPrefix() string      { return l.prefix + "rollouts/" }
func (l layout) rolloutsOf(ns string) string { return l.rolloutsPrefix() + ns + "/" }
func (l layout) rollout(ns string, seq uint64) string {
	return fmt.Sprintf("%s%020d", l.rolloutsOf(ns), seq)
}
func (l layout) rolloutEventsOf(ns string, seq uint64) string {
	return fmt.Sprintf("%srolloutevents/%s/%020d/", l.prefix, ns, seq)
}
func (l layout) rolloutEvent(ns string, seq, n uint64) string {
	return fmt.Sprintf("%s%06d", l.rolloutEventsOf(ns, seq), n)
}
func (l layout) evaluationsPrefix() string      { return l.prefix + "evaluations/" }
func (l layout) evaluationsNS(ns string) string { return l.evaluationsPrefix() + ns + "/" }
func (l layout) evaluationsOf(ns string, seq uint64) string {
	return fmt.Sprintf("%s%020d/", l.evaluationsNS(ns), seq)
}
func (l layout) evaluation(ns string, seq uint64, name string) string {
	return l.evaluationsOf(ns, seq) + name
}
func (l layout) usage(domain string) string      { return l.prefix + "usage/" + domain }
func (l layout) usagePrefix() string             { return l.prefix + "usage/" }
func (l layout) auditPrefix() string             { return l.prefix + "audit/" }
func (l layout) experimentsOf(ns string) string  { return l.prefix + "experiments/" + ns + "/" }
func (l layout) experiment(ns, id string) string { return l.experimentsOf(ns) + id }
func (l layout) experimentsPrefix() string       { return l.prefix + "experiments/" }
func (l layout) experimentHistPrefix() string    { return l.prefix + "experimenthist/" }
func (l layout) experimentHist(ns, id string) string {
	return l.experimentHistPrefix() + ns + "/" + id
}
func (l layout) rolloutCommandsPrefix() string { return l.prefix + "rolloutcmds/" }
func (l layout) rolloutCommand(ns string, seq uint64) string {
	return fmt.Sprintf("%s%s/%020d", l.rolloutCommandsPrefix(), ns, seq)
}
func (l layout) dataOf(ns string) string          { return l.prefix + "data/" + ns + "/" }
func (l layout) rolloutEventsNS(ns string) string { return l.prefix + "rolloutevents/" + ns + "/" }
func (l layout) rolloutCommandsOf(ns string) string {
	return l.rolloutCommandsPrefix() + ns + "/"
}
func (l layout) tombstonesPrefix() string     { return l.prefix + "tombstones/" }
func (l layout) nsTombstone(ns string) string { return l.tombstonesPrefix() + "ns/" + ns }
func (l layout) nsTombstonesDomain(domain string) string {
	return l.tombstonesPrefix() + "ns/" + domain + "/"
}
func (l layout) domainTombstone(domain string) string {
	return l.tombstonesPrefix() + "domain/" + domain
}
func (l layout) propagation() string              { return l.prefix + "propagation" }
func (l layout) zonesPrefix() string              { return l.prefix + "zones/" }
func (l layout) zone(z string) string             { return l.zonesPrefix() + z }
func (l layout) goalsPrefix() string              { return l.prefix + "goals/" }
func (l layout) goalsZone(z string) string        { return l.goalsPrefix() + z + "/" }
func (l layout) goalsSigned() string              { return l.prefix + "migrations/goals-signed" }
func (l layout) goal(z, ns string) string         { return l.goalsZone(z) + ns }
func (l layout) zoneStatusesPrefix() string       { return l.prefix + "zonestatus/" }
func (l layout) zoneReportedPrefix() string       { return l.prefix + "zonereported/" }
func (l layout) zoneReported(z string) string     { return l.zoneReportedPrefix() + z }
func (l layout) zoneStatusPrefix(z string) string { return l.zoneStatusesPrefix() + z + "/" }
func (l layout) zoneStatus(z, id string) string   { return l.zoneStatusPrefix(z) + id }
func (l layout) zoneReportsZone(z string) string  { return l.prefix + "zonereports/" + z + "/" }
func (l layout) zoneReportDist(z, id string) string {
	return l.zoneReportsZone(z) + reportIDHash(id) + "/"
}
func (l layout) zoneReportIndex(z, id string) string {
	return l.zoneReportDist(z, id) + "index"
}
func (l layout) zoneReportPart(z, id, name string) string {
	return l.zoneReportDist(z, id) + "p/" + name
}
func (l layout) distributorFromZoneStatus(z, key string) string {
	return strings.TrimPrefix(key, l.zoneStatusPrefix(z))
}
func (l layout) nameFromNsmeta(key string) string { return strings.TrimPrefix(key, l.nsmetaPrefix()) }
func (l layout) hashFromBlob(ns, key string) string {
	return strings.TrimPrefix(key, l.blobsPrefix(ns))
}
func (l layout) nsFromGoal(zone, key string) string {
	return strings.TrimPrefix(key, l.goalsZone(zone))
}
func (l layout) zoneFromKey(key string) string   { return strings.TrimPrefix(key, l.zonesPrefix()) }
func (l layout) domainFromKey(key string) string { return strings.TrimPrefix(key, l.domainsPrefix()) }
func (l layout) identity() string                { return l.prefix + "identity" }
func (l layout) replicasPrefix() string          { return l.prefix + "replicas/" }
func (l layout) replica(address string) string   { return l.replicasPrefix() + address }
func prefixEnd(prefix string) string             { return clientv3.GetPrefixRangeEnd(prefix) }
func afterKey(key string) string                 { return key + "\x00" }

// Limits that follow from etcd's defaults. An external etcd must not be
// configured below them: --max-txn-ops 128 and --max-request-bytes 1.5 MiB.
const (
	// maxOpsPerTxn bounds the operations (and the comparisons) of one
	// transaction, below etcd's default --max-txn-ops of 128.
	maxOpsPerTxn = 100
	// maxTxnPayload bounds the value bytes written by one staging
	// transaction, well below etcd's 1.5 MiB default request limit.
	maxTxnPayload = 1 << 20
	// maxInlineOps and maxInlineBytes bound the blobs a commit writes in
	// its version transaction instead of staging them first (a small
	// change: one durable commit instead of two), and maxInlineTxnOps the
	// operations of that transaction with them (etcd allows 128).
	maxInlineOps    = 16
	maxInlineBytes  = 32 << 10
	maxInlineTxnOps = 120
	// MaxBlobBytes is the largest property value the store accepts: one
	// value is one etcd put. Control's own cap (package validate) is lower.
	MaxBlobBytes = 1 << 20
	// MaxZones is the most zones the store registers: a commit sets every
	// zone's goal in one transaction, which etcd bounds to 128 operations.
	MaxZones = 96
	// maxReadBatchBytes bounds the value bytes fetched by one read
	// transaction when assembling content.
	maxReadBatchBytes = 8 << 20
	// chunkTargetBytes caps an encoded manifest chunk. Chunk boundaries are
	// otherwise chosen from key hashes (see buildManifest), so a change to
	// one property rewrites one chunk, not every chunk after it.
	chunkTargetBytes = 256 << 10
)
