package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"lehr.dev/lehr/proto/lehrpb"
)

func runStore(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr store", doc{
		usage:   "lehr store [status] [flags]",
		summary: "show how full control's store is, and what each domain stores",
		about: `Shows control's store (its etcd) as control last read it, every second: its
size against its quota, the part holding data (the rest is free pages that a
defragmentation gives back), and the two marks where new content is refused —
above the high-water mark (quota minus the reserve kept for rollbacks, goal
moves and the audit log) from domains over their fair share and from new
domains and namespaces, above quota minus half the reserve from every domain
(rollbacks go on). Then every domain with what it stores against its own
stored-bytes quota, most first.

To give space back: 'lehr history compact NS --keep N' removes old versions of
a namespace, and control compacts and defragments etcd by itself above the
high-water mark; below it, control's embedded etcd gives its free pages back
at control's next start, before it serves. To change the marks: 'lehr control --store-quota 16GiB
--store-reserve 2GiB'; a domain's own quota: 'lehr domain update D
--max-stored-bytes SIZE' (docs/operations.md, "Quotas and the store's
space").`,
		examples: []string{
			"lehr store",
			"lehr store -o json | jq '.domains[0]'",
		},
	})
	cf := addClientFlags(fs, e)
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 && pos[0] != "status" {
		return usageError(e, fs, "unknown subcommand %q: want status (or nothing)", pos[0])
	}
	if len(pos) > 1 {
		return usageError(e, fs, "no arguments after status")
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	st, err := c.GetStoreStatus(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, st)
	}
	writeStoreStatus(e.stdout, st, time.Now())
	return exitOK
}

// writeStoreStatus prints st for a person.
func writeStoreStatus(w io.Writer, st *lehrpb.StoreStatus, now time.Time) {
	if st.GetReadTime() == nil {
		fmt.Fprintln(w, "store: control has not read etcd's status yet; try again in a second")
	} else {
		fmt.Fprintf(w, "store: %s of its %s quota (%s); %s holds data, the rest is free pages\n",
			fmtBytes(st.GetSizeBytes()), fmtBytes(st.GetQuotaBytes()), percent(st.GetSizeBytes(), st.GetQuotaBytes()), fmtBytes(st.GetInUseBytes()))
		fmt.Fprintf(w, "new content refused above %s (quota less the %s reserve) from domains over their fair share of %s, above %s from every domain\n",
			fmtBytes(st.GetHighWaterBytes()), fmtBytes(st.GetReserveBytes()), fmtBytes(st.GetFairShareBytes()),
			fmtBytes(st.GetQuotaBytes()-st.GetReserveBytes()/2))
		fmt.Fprintf(w, "etcd revision %d, read %v ago\n", st.GetRevision(), now.Sub(st.GetReadTime().AsTime()).Round(100*time.Millisecond))
		switch {
		case st.GetNospaceAlarm():
			fmt.Fprintln(w, "etcd's NOSPACE alarm is raised: every write but the safety path fails until control has compacted and defragmented; it disarms the alarm itself")
		case st.GetSizeBytes() > st.GetHighWaterBytes():
			fmt.Fprintln(w, "above the high-water mark: domains over their fair share are refused new content; control is compacting and defragmenting")
		case st.GetDefragmentAtStart():
			fmt.Fprintf(w, "%s of free pages are given back when control next starts, before it serves (an online defragmentation of its embedded etcd would stall every call meanwhile), or online once space demands it\n",
				fmtBytes(st.GetSizeBytes()-st.GetInUseBytes()))
		}
	}
	if len(st.GetDomains()) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tSTORED\tQUOTA\tUSED")
	for _, d := range st.GetDomains() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", clean(d.GetDomain()), fmtBytes(d.GetStoredBytes()), fmtBytes(d.GetMaxStoredBytes()),
			percent(d.GetStoredBytes(), d.GetMaxStoredBytes()))
	}
	tw.Flush()
}

// percent is part of whole as "12.5 %", or "-" without a whole.
func percent(part, whole int64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
}
