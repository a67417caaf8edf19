package preview

import (
	"cmp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/proto/lehrpb"
)

// Add adds src's decision counts to dst's (the etags and zone are left
// alone).
func Add(dst, src *lehrpb.PreviewCounts) {
	dst.AllowAllow += src.GetAllowAllow()
	dst.DenyDeny += src.GetDenyDeny()
	dst.AllowDeny += src.GetAllowDeny()
	dst.DenyAllow += src.GetDenyAllow()
	dst.ExperimentErrors += src.GetExperimentErrors()
}

// Decisions returns the decisions c counts, and how many of them the
// experiment disagreed with the live policy on.
func Decisions(c *lehrpb.PreviewCounts) (total, disagree uint64) {
	disagree = c.GetAllowDeny() + c.GetDenyAllow()
	return c.GetAllowAllow() + c.GetDenyDeny() + disagree, disagree
}

// Key identifies one configuration pair of one experiment: its
// namespace, the experiment's id, the live policy's etag and the
// experiment's etag. Where counts are summed per zone, Namespace holds the
// zone.
type Key struct {
	Namespace, Experiment, LiveEtag, ExperimentEtag string
}

func (k Key) compare(o Key) int {
	return cmp.Or(strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.Experiment, o.Experiment),
		strings.Compare(k.LiveEtag, o.LiveEtag), strings.Compare(k.ExperimentEtag, o.ExperimentEtag))
}

// Tally sums counts by Key, holding at most its bound of keys: beyond
// it, the key added to least recently is dropped (Dropped counts them),
// so a tally follows the experiments in use, not every configuration
// ever seen. Agents keep one per namespace, distributors sum their agents'
// into one per report, control sums the distributors' with one. Not safe
// for concurrent use.
type Tally struct {
	max     int
	m       map[Key]*tallied
	clock   uint64
	dropped uint64
}

type tallied struct {
	counts *lehrpb.PreviewCounts
	used   uint64
}

// NewTally returns an empty tally of at most bound keys (at least 1).
func NewTally(bound int) *Tally { return &Tally{max: max(1, bound), m: map[Key]*tallied{}} }

// Add adds c's counts to k's.
func (t *Tally) Add(k Key, c *lehrpb.PreviewCounts) {
	t.clock++
	e := t.m[k]
	if e == nil {
		if len(t.m) >= t.max {
			var oldest Key
			first := true
			for ok, oe := range t.m {
				if first || oe.used < t.m[oldest].used {
					oldest, first = ok, false
				}
			}
			delete(t.m, oldest)
			t.dropped++
		}
		e = &tallied{counts: &lehrpb.PreviewCounts{LiveEtag: k.LiveEtag, ExperimentEtag: k.ExperimentEtag}}
		t.m[k] = e
	}
	e.used = t.clock
	Add(e.counts, c)
}

// Len returns how many keys the tally holds.
func (t *Tally) Len() int { return len(t.m) }

// Dropped returns how many keys were dropped for the bound.
func (t *Tally) Dropped() uint64 { return t.dropped }

// Each calls f with every key and its counts, in key order. f must not
// change the counts.
func (t *Tally) Each(f func(k Key, c *lehrpb.PreviewCounts)) {
	keys := make([]Key, 0, len(t.m))
	for k := range t.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, Key.compare)
	for _, k := range keys {
		f(k, t.m[k].counts)
	}
}

// Namespaces returns the tally as namespaces' host counts, sorted: the
// form agents' and distributors' reports carry. The counts are copies:
// the tally may change on.
func (t *Tally) Namespaces() []*lehrpb.NamespacePreviewCounts {
	var out []*lehrpb.NamespacePreviewCounts
	t.Each(func(k Key, c *lehrpb.PreviewCounts) {
		if len(out) == 0 || out[len(out)-1].GetNamespace() != k.Namespace {
			out = append(out, &lehrpb.NamespacePreviewCounts{Namespace: k.Namespace})
		}
		last := out[len(out)-1]
		last.Counts = append(last.Counts, &lehrpb.HostPreviewCounts{Experiment: k.Experiment, Counts: proto.CloneOf(c)})
	})
	return out
}
