package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

// runControlStatus is "lehr control status".
func runControlStatus(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr control status", doc{
		usage:   "lehr control status [--control ADDR[,ADDR…]] [flags]",
		summary: "show the control replicas sharing a store, the strategist's leader and the store",
		about: `Asks control which store it serves and who shares it: the store's id (made
once, when the first replica started on it) and where it is — the external
etcd of --etcd-endpoints, or an etcd embedded in the replica — with etcd's
members and leader; every control replica registered in that store, with its
build, when it started and when it last renewed its registration (a replica
that dies stays listed for at most 10 s); which of them leads the rollout
strategist; and which replica answered.

With several addresses (--control a:7400,b:7400) each replica is asked on a
connection of its own, and each answer printed. Replicas of one cluster serve
one store; when the answers name different stores this says so and exits 1:
a replica serving another store was started without the --etcd-endpoints
(LEHR_ETCD_ENDPOINTS) of the others and runs an empty store of its own, whose
answers distributors following the cluster's store refuse. Give it the
cluster's endpoints and restart it (docs/operations.md, "control").

-o json prints each answer as one JSON object (the ControlStatus message).`,
		examples: []string{
			"lehr control status",
			"lehr control status --control ctl-a:7400,ctl-b:7400,ctl-c:7400 --tls-ca ca.crt",
			"lehr control status -o json | jq -r .strategist_leader",
		},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 0, "no arguments"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	addrs := splitList(cf.control)
	if len(addrs) == 0 {
		return usageError(e, fs, "--control: want a control address, or several comma-separated")
	}
	if e.checkOnly {
		return exitOK
	}

	// Each replica on a connection of its own: a client that fails over
	// between them would hide a split.
	answers := make([]controlAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := *cf
			one.control = addr
			answers[i] = controlAnswer{addr: addr}
			c, cctx, done, err := one.connect(ctx)
			if err != nil {
				answers[i].err = err
				return
			}
			defer done()
			answers[i].st, answers[i].err = c.GetControlStatus(cctx)
		}()
	}
	wg.Wait()

	now := time.Now()
	failed := false
	for i, a := range answers {
		if len(answers) > 1 && !cf.json() {
			if i > 0 {
				fmt.Fprintln(e.stdout)
			}
			fmt.Fprintf(e.stdout, "== control at %s ==\n", clean(a.addr))
		}
		if a.err != nil {
			failed = true
			name := fs.Name()
			if len(answers) > 1 {
				name += ": control at " + a.addr
			}
			if apierror.FromError(a.err).Code == codes.Unimplemented {
				fmt.Fprintf(e.stderr, "%s: control at %s does not implement GetControlStatus (it is older than this lehr); upgrade it\n", fs.Name(), clean(a.addr))
				continue
			}
			reportError(e, name, a.err, errorContext{control: a.addr})
			continue
		}
		if cf.json() {
			if code := printOrFail(e, a.st); code != exitOK {
				return code
			}
			continue
		}
		writeControlStatus(e.stdout, a.st, now)
	}
	if split := storeSplit(answers); split != "" {
		fmt.Fprintf(e.stderr, "%s: %s", fs.Name(), split)
		return exitError
	}
	if failed {
		return exitError
	}
	if len(answers) > 1 && !cf.json() {
		fmt.Fprintf(e.stdout, "\nall %d replicas asked serve store %s\n", len(answers), clean(answers[0].st.GetStore().GetId()))
	}
	return exitOK
}

// controlAnswer is one replica's answer to "lehr control status".
type controlAnswer struct {
	addr string // as given to --control
	st   *lehrpb.ControlStatus
	err  error
}

// storeSplit says, loudly, which of the answers serve another store than
// the cluster's, "" when they all serve one. The cluster's store is the
// one most addresses answered with — on a tie the oldest, since a replica
// started on an etcd of its own makes a new store.
func storeSplit(answers []controlAnswer) string {
	type store struct {
		id      *lehrpb.StoreIdentity
		addrs   []string
		firstAt int
	}
	byID := map[string]*store{}
	var stores []*store
	for i, a := range answers {
		if a.err != nil {
			continue
		}
		id := a.st.GetStore().GetId()
		s := byID[id]
		if s == nil {
			s = &store{id: a.st.GetStore(), firstAt: i}
			byID[id] = s
			stores = append(stores, s)
		}
		s.addrs = append(s.addrs, clean(a.addr))
	}
	if len(stores) < 2 {
		return ""
	}
	slices.SortStableFunc(stores, func(a, b *store) int {
		return cmp.Or(cmp.Compare(len(b.addrs), len(a.addrs)),
			cmp.Compare(a.id.GetCreateTime().AsTime().UnixNano(), b.id.GetCreateTime().AsTime().UnixNano()),
			cmp.Compare(a.firstAt, b.firstAt))
	})
	var b strings.Builder
	ref := stores[0]
	fmt.Fprintf(&b, "WARNING: these control replicas do not share one store\n")
	for _, s := range stores {
		fmt.Fprintf(&b, "  store %s (created %s): %s\n", clean(s.id.GetId()), fmtTime(s.id.GetCreateTime()), strings.Join(s.addrs, ", "))
	}
	for _, s := range stores[1:] {
		for _, a := range s.addrs {
			fmt.Fprintf(&b, "replica at %s serves a different store (%s) than %s (%s) — it is not configured with the --etcd-endpoints of the others\n",
				a, clean(s.id.GetId()), strings.Join(ref.addrs, ", "), clean(ref.id.GetId()))
		}
	}
	fmt.Fprintf(&b, "A replica started without --etcd-endpoints (LEHR_ETCD_ENDPOINTS) runs an etcd of its own, with a store of its own: "+
		"distributors following the cluster's store refuse its answers, and what is published to it reaches none of them. "+
		"Give it the --etcd-endpoints of the others and restart it (docs/operations.md, \"control\").\n")
	return b.String()
}

// writeControlStatus prints one replica's answer for a person.
func writeControlStatus(w io.Writer, st *lehrpb.ControlStatus, now time.Time) {
	s := st.GetStore()
	where := "in the etcd embedded in the replica that answered"
	if !st.GetEmbeddedEtcd() {
		eps := make([]string, len(st.GetEtcdEndpoints()))
		for i, ep := range st.GetEtcdEndpoints() {
			eps[i] = clean(ep)
		}
		where = "in the external etcd at " + strings.Join(eps, ",")
	}
	fmt.Fprintf(w, "store %s, created %s, %s\n", clean(s.GetId()), fmtTime(s.GetCreateTime()), where)
	if e := st.GetEtcd(); e != nil {
		members := make([]string, len(e.GetMembers()))
		for i, m := range e.GetMembers() {
			members[i] = clean(m)
		}
		leader := "no member leads"
		if e.GetLeader() != "" {
			leader = clean(e.GetLeader()) + " leads"
		}
		fmt.Fprintf(w, "etcd cluster %s: %d %s (%s), %s; etcd %s\n", clean(e.GetClusterId()), len(members), plural(len(members), "member", "members"),
			strings.Join(members, ", "), leader, orDash(e.GetVersion()))
	}
	fmt.Fprintf(w, "answered by %s\n", clean(st.GetReplica()))
	leader := st.GetStrategistLeader()
	registered := slices.ContainsFunc(st.GetReplicas(), func(r *lehrpb.ControlReplica) bool { return r.GetAddress() == leader })
	switch {
	case leader == "":
		fmt.Fprintln(w, "no replica leads the rollout strategist (rollouts are off, or an election is under way)")
	case !registered:
		fmt.Fprintf(w, "the rollout strategist is led by %s, which is not registered (a replica older than this lehr?)\n", clean(leader))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tSTRATEGIST\tSTARTED\tLAST SEEN\tETCD\tVERSION")
	for _, r := range st.GetReplicas() {
		role, etcd := "-", "external"
		if r.GetAddress() == leader {
			role = "leader"
		}
		if r.GetEmbeddedEtcd() {
			etcd = "embedded"
		}
		seen := "-"
		if r.GetLastSeenTime() != nil {
			seen = fmt.Sprintf("%v ago", max(0, now.Sub(r.GetLastSeenTime().AsTime()).Round(time.Second)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(r.GetAddress()), role, fmtTime(r.GetStartTime()), seen, etcd, orDash(r.GetVersion()))
	}
	tw.Flush()
}
