package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

func runAudit(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr audit", doc{
		usage:   "lehr audit [--domain D] [--since T] [--limit N] [flags]",
		summary: "show the audit log: every change anyone asked control for",
		about: `Control records every mutating call — publishes, patches, rollbacks, domains,
zones, rollout policies and actions, canary evaluations, policy experiments
and their commits — as it ends, refused calls too: when, who (the client
certificate's identity, or the asserted author on loopback), what and on
which target, the version it created, the message, and the result. Records
are kept for control's --audit-retention (default 90 days), oldest first.`,
		examples: []string{
			"lehr audit --domain payments --since 24h",
			"lehr audit --since 2026-11-24T00:00:00Z -o json",
		},
	})
	cf := addClientFlags(fs, e)
	domain := fs.String("domain", "", "only the records of `domain`")
	since := fs.String("since", "", "only records at or after `T`: an RFC 3339 time, or a duration back from now (24h)")
	limit := fs.Int("limit", 1000, "show at most `N` records")
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
	if *limit < 1 {
		return usageError(e, fs, "--limit %d: want at least 1", *limit)
	}
	req := &lehrpb.ListAuditRecordsRequest{Domain: *domain}
	if *since != "" {
		t, err := time.Parse(time.RFC3339, *since)
		if err != nil {
			d, derr := time.ParseDuration(*since)
			if derr != nil || d < 0 {
				return usageError(e, fs, "--since %q: want an RFC 3339 time (2026-11-24T00:00:00Z) or a duration back from now (24h)", *since)
			}
			t = time.Now().Add(-d)
		}
		req.Since = timestamppb.New(t)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	out := &lehrpb.ListAuditRecordsResponse{}
	for len(out.Records) < *limit {
		req.PageSize = int32(min(1000, *limit-len(out.Records)))
		resp, err := c.RPC().ListAuditRecords(ctx, req)
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		out.Records = append(out.Records, resp.GetRecords()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if cf.json() {
		return printOrFail(e, out)
	}
	writeAudit(e.stdout, out.GetRecords())
	return exitOK
}

// writeAudit prints audit records, one a line.
func writeAudit(w io.Writer, recs []*lehrpb.AuditRecord) {
	if len(recs) == 0 {
		fmt.Fprintln(w, "no audit records")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tAUTHOR\tMETHOD\tTARGET\tVERSION\tRESULT\tMESSAGE")
	for _, r := range recs {
		v := "-"
		if r.GetVersion() > 0 {
			v = fmt.Sprint(r.GetVersion())
		}
		res := clean(r.GetCode())
		if n := r.GetRepeats(); n > 0 {
			res += fmt.Sprintf(" (and %d more alike)", n)
		}
		if r.GetError() != "" {
			res += ": " + oneLine(r.GetError())
		}
		if d := r.GetDetail(); d != "" {
			res += " (" + oneLine(d) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(r.GetTime()), orDash(r.GetAuthor()), clean(r.GetMethod()),
			orDash(r.GetTarget()), v, res, orDash(oneLine(r.GetMessage())))
	}
	tw.Flush()
}
