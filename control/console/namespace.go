package console

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/proto/lehrpb"
)

// The domain page (its quotas and usage, ACL and namespaces), the
// namespace page (versions, goal and hosts per zone, rollouts) and the
// diff between two versions.

// historyPage is how many versions the namespace page lists.
const historyPage = 50

// quotaRow is one of a domain's quotas, with its usage where control
// counts one.
type quotaRow struct {
	Name, Limit, Used string
	// Share of the limit used, 0–100; -1 without a usage.
	Percent int
}

type domainPage struct {
	Domain     *lehrpb.Domain
	Quotas     []quotaRow
	Namespaces []*lehrpb.Namespace
	More       bool
}

func (c *Console) domain(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("domain")
	d, err := c.opts.Client.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: name})
	if err != nil {
		c.failAPI(w, r, "domain "+name, err)
		return
	}
	ns, err := c.opts.Client.ListNamespaces(ctx, &lehrpb.ListNamespacesRequest{Domain: name, PageSize: 500})
	if err != nil {
		c.failAPI(w, r, "namespaces of "+name, err)
		return
	}
	dp := domainPage{Domain: d, Quotas: quotaRows(d), Namespaces: ns.GetNamespaces(), More: ns.GetNextPageToken() != ""}
	doc := map[string]any{"page": "domain", "domain": pj(d), "namespaces": pjs(ns.GetNamespaces()), "moreNamespaces": dp.More}
	c.render(w, r, "domain", page{Title: "Domain " + name, Crumbs: []crumb{{"Fleet", Prefix}}, Body: dp}, doc)
}

// quotaRows lists d's quotas in force, with the usage control counts.
func quotaRows(d *lehrpb.Domain) []quotaRow {
	q, u := d.GetEffectiveQuotas(), d.GetUsage()
	bytesRow := func(name string, limit, used int64, withUse bool) quotaRow {
		row := quotaRow{Name: name, Limit: ibytes(limit), Percent: -1}
		if limit == 0 {
			row.Limit = "none"
		}
		if withUse {
			row.Used = ibytes(used)
			row.Percent = percent(used, limit)
		}
		return row
	}
	num := func(name string, limit int64) quotaRow {
		row := quotaRow{Name: name, Limit: strconv.FormatInt(limit, 10), Percent: -1}
		if limit == 0 {
			row.Limit = "none"
		}
		return row
	}
	ns := num("namespaces", int64(q.GetMaxNamespaces()))
	ns.Used, ns.Percent = strconv.Itoa(int(u.GetNamespaces())), percent(int64(u.GetNamespaces()), int64(q.GetMaxNamespaces()))
	rate := quotaRow{Name: "publishes per second", Limit: strconv.FormatFloat(q.GetPublishesPerSecond(), 'g', 4, 64), Percent: -1}
	if q.GetPublishesPerSecond() == 0 {
		rate.Limit = "none"
	}
	return []quotaRow{
		bytesRow("stored bytes", q.GetMaxStoredBytes(), u.GetStoredBytes(), true),
		ns,
		rate,
		num("publish burst", int64(q.GetPublishBurst())),
		bytesRow("publish bytes per second", q.GetPublishBytesPerSecond(), 0, false),
		bytesRow("outbound bytes per second, per zone", q.GetOutboundBytesPerSecond(), 0, false),
		num("subscriptions per zone", int64(q.GetMaxSubscriptions())),
		bytesRow("bytes per namespace", q.GetMaxNamespaceBytes(), 0, false),
		num("properties per namespace", int64(q.GetMaxProperties())),
		bytesRow("bytes per value", q.GetMaxValueBytes(), 0, false),
	}
}

func ibytes(n int64) string { return funcs["bytes"].(func(int64) string)(n) }

func percent(used, limit int64) int {
	if limit <= 0 {
		return -1
	}
	return int(min(100, used*100/limit))
}

// zoneNS is one namespace in one zone: its goal and how many hosts hold
// each version.
type zoneNS struct {
	Zone     string
	Goal     *lehrpb.GoalState // nil: no goal in the zone
	GoalErr  string
	Versions []*lehrpb.VersionCount
	Health   []*lehrpb.NamespaceHealth
	Hosts    int
	AtGoal   int
	// Consumers hold leases on the namespace in the zone; Services are
	// theirs, most first (services.Max at most), and Unlisted those of no
	// listed service.
	Consumers int
	Services  []*lehrpb.ServiceConsumers
	Unlisted  int
	StateErr  string
}

type namespacePage struct {
	Namespace *lehrpb.Namespace
	Versions  []*lehrpb.VersionInfo
	More      bool
	Zones     []zoneNS
	Rollouts  []*lehrpb.Rollout
	// DiffFrom and DiffTo are the diff form's defaults.
	DiffFrom, DiffTo uint64
}

func (c *Console) namespace(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("domain") + "/" + r.PathValue("name")
	n, err := c.opts.Client.GetNamespace(ctx, &lehrpb.GetNamespaceRequest{Name: name})
	if err != nil {
		c.failAPI(w, r, "namespace "+name, err)
		return
	}
	h, err := c.opts.Client.History(ctx, &lehrpb.HistoryRequest{Namespace: name, PageSize: historyPage})
	if err != nil {
		c.failAPI(w, r, "history of "+name, err)
		return
	}
	rs, err := c.opts.Client.ListRollouts(ctx, &lehrpb.ListRolloutsRequest{Namespace: name})
	if err != nil {
		c.failAPI(w, r, "rollouts of "+name, err)
		return
	}
	zs, err := c.opts.Client.ListZones(ctx, &lehrpb.ListZonesRequest{})
	if err != nil {
		c.failAPI(w, r, "list zones", err)
		return
	}
	np := namespacePage{Namespace: n, Versions: h.GetVersions(), More: h.GetNextPageToken() != "", Rollouts: rs.GetRollouts()}
	np.DiffTo = n.GetLatestVersion()
	np.DiffFrom = max(n.GetOldestVersion(), min(np.DiffTo, np.DiffTo-1))
	var jz []map[string]any
	for _, z := range zs.GetZones() {
		zn := zoneNS{Zone: z.GetName()}
		if g, err := c.opts.Client.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: z.GetName(), Namespace: name}); err != nil {
			zn.GoalErr = err.Error()
		} else if len(g.GetGoals()) > 0 {
			zn.Goal = g.GetGoals()[0]
		}
		if st, err := c.opts.Client.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z.GetName(), Namespace: name}); err != nil {
			zn.StateErr = err.Error()
		} else {
			svcs := map[string]int{}
			for _, vc := range st.GetVersions() {
				if vc.GetNamespace() != name {
					continue
				}
				zn.Versions = append(zn.Versions, vc)
				zn.Hosts += int(vc.GetAgents())
				zn.Consumers += int(vc.GetConsumers())
				for _, s := range vc.GetServices() {
					svcs[s.GetService()] += int(s.GetConsumers())
				}
				if zn.Goal != nil && vc.GetVersion() == zn.Goal.GetVersion() {
					zn.AtGoal += int(vc.GetAgents())
				}
			}
			for _, hh := range st.GetHealth() {
				if hh.GetNamespace() == name {
					zn.Health = append(zn.Health, hh)
				}
			}
			zn.Services = services.Top(svcs)
			zn.Unlisted = zn.Consumers
			for _, s := range zn.Services {
				zn.Unlisted -= int(s.GetConsumers())
			}
			zn.Unlisted = max(zn.Unlisted, 0)
		}
		slices.SortFunc(zn.Versions, func(a, b *lehrpb.VersionCount) int { return -cmp.Compare(a.GetVersion(), b.GetVersion()) })
		np.Zones = append(np.Zones, zn)
		jz = append(jz, map[string]any{"zone": zn.Zone, "goal": pj(zn.Goal), "versions": pjs(zn.Versions), "health": pjs(zn.Health),
			"hosts": zn.Hosts, "hostsAtGoal": zn.AtGoal, "consumers": zn.Consumers, "services": pjs(zn.Services), "consumersUnlisted": zn.Unlisted,
			"goalError": zn.GoalErr, "statusError": zn.StateErr})
	}
	doc := map[string]any{"page": "namespace", "namespace": pj(n), "versions": pjs(np.Versions), "moreVersions": np.More,
		"zones": nonNil(jz), "rollouts": pjs(np.Rollouts)}
	d, _, _ := cutNS(name)
	c.render(w, r, "namespace", page{Title: "Namespace " + name, Crumbs: []crumb{{"Fleet", Prefix}, {"Domain " + d, domainURL(d)}}, Body: np}, doc)
}

// diffValue is a property's value as the diff shows it.
type diffValue struct {
	Text string // the value as text (shown through clean), or hex
	Hex  bool   // Text is hex: the value is not UTF-8 text
	Cut  int    // bytes left out (values are shown up to maxDiffValue)
}

type diffChange struct {
	Key      string
	Kind     string // "added", "removed", "modified"
	Old, New *diffValue
}

type diffPage struct {
	Namespace string
	Diff      *lehrpb.DiffResponse
	Changes   []diffChange
	From, To  uint64
}

// maxDiffValue bounds a value the diff page shows.
const maxDiffValue = 4 << 10

func showValue(p *lehrpb.Property) *diffValue {
	if p == nil {
		return nil
	}
	b := p.GetValue()
	v := &diffValue{}
	if len(b) > maxDiffValue {
		v.Cut = len(b) - maxDiffValue
		b = b[:maxDiffValue]
	}
	if utf8.Valid(b) || v.Cut > 0 && utf8.Valid(b[:max(0, len(b)-3)]) {
		v.Text = string(b)
		return v
	}
	const hexdigits = "0123456789abcdef"
	out := make([]byte, 0, len(b)*3)
	for i, c := range b {
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, hexdigits[c>>4], hexdigits[c&15])
	}
	v.Text, v.Hex = string(out), true
	return v
}

func (c *Console) diff(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("domain") + "/" + r.PathValue("name")
	q := r.URL.Query()
	from, err1 := strconv.ParseUint(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseUint(q.Get("to"), 10, 64)
	if err1 != nil || err2 != nil {
		c.fail(w, r, http.StatusBadRequest, "INVALID_ARGUMENT", "a diff needs two versions: ?from=N&to=M")
		return
	}
	d, err := c.opts.Client.Diff(ctx, &lehrpb.DiffRequest{Namespace: name, From: from, To: to})
	if err != nil {
		c.failAPI(w, r, "diff of "+name, err)
		return
	}
	dp := diffPage{Namespace: name, Diff: d, From: from, To: to}
	for _, ch := range d.GetChanges() {
		kind := "modified"
		switch ch.GetKind() {
		case lehrpb.PropertyChange_KIND_ADDED:
			kind = "added"
		case lehrpb.PropertyChange_KIND_REMOVED:
			kind = "removed"
		}
		dp.Changes = append(dp.Changes, diffChange{Key: ch.GetKey(), Kind: kind, Old: showValue(ch.GetOld()), New: showValue(ch.GetNew())})
	}
	doc := map[string]any{"page": "diff", "namespace": name, "diff": pj(d)}
	dn, _, _ := cutNS(name)
	c.render(w, r, "diff", page{Title: "Diff of " + name, Crumbs: []crumb{{"Fleet", Prefix}, {"Domain " + dn, domainURL(dn)}, {"Namespace " + name, nsURL(name)}}, Body: dp}, doc)
}

// cutNS splits "domain/name".
func cutNS(ns string) (domain, name string, ok bool) { return strings.Cut(ns, "/") }
