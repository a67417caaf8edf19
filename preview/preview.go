// Package preview is the model of AIP-236 policy preview (docs/preview.md),
// as every role shares it: the etags of a policy's live version and of an
// experiment, the experiments as hosts receive them in the policy's preview
// namespace (and the comparison of a committed version with the version it
// replaced, which travels with them during its rollout), the counts of pairs of decisions and their bounded tally, the
// gate a commit passes and the change it is expected to make, the
// decision log line, and the words an experiment's state, counts and gate
// are shown in (describe.go). It is pure: no I/O, no role. Control's
// handlers and records, the consumer's shadow evaluation, the agent's and
// the distributors' sums, the CLI and the operator console call it.
//
// Importable by every role; it imports only policy and internal leaves.
package preview

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// LogPrefix begins every decision log line of a preview unless an
// experiment names its own: AIP-236's log_prefix.
const LogPrefix = "PolicyPreviewLog"

// LiveEtag is the etag of a policy's live version seq.
func LiveEtag(seq uint64) string { return "v" + strconv.FormatUint(seq, 10) }

// ExperimentEtag is a digest of what experiment e configures: its rules
// and annotations (not its state, times or author).
func ExperimentEtag(e *lehrpb.PolicyExperiment) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&lehrpb.PolicyExperiment{
		Policy: &lehrpb.Policy{Rules: e.GetPolicy().GetRules()}, Annotations: e.GetAnnotations(),
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
