package main

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/distributor/goalwatch"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/proto/lehrpb"
)

func runZones(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr zones", doc{
		usage:   "lehr zones list|create|delete|status [NAME] [flags]",
		summary: "list, create, delete and show the status of zones",
		about: `A zone is a failure domain served by its own distributors. Zones are
fleet-wide: every rollout reaches every zone.`,
		examples: []string{
			"lehr zones list",
			"lehr zones status us-east-1a",
		},
		subs: []subDoc{
			{path: "list", doc: doc{
				usage:    "lehr zones list [flags]",
				summary:  "list the registered zones",
				about:    "Lists every registered zone with when it was created and when its distributors last reported.",
				examples: []string{"lehr zones list", "lehr zones list -o json | jq -r '.zones[].name'"},
			}},
			{path: "create", doc: doc{
				usage:   "lehr zones create NAME [flags]",
				summary: "register a zone",
				about: `Registers zone NAME (distributors also register their zone when they first
connect). A new zone's goals start at every namespace's latest version.
Zones are fleet-wide, so only fleet admins create them: the identities
'lehr control --fleet-admins NAME,…' names, and control's own user or root on
its unix socket ('sudo lehr --control unix:///run/lehr-control/control.sock
zones create NAME').`,
				examples: []string{
					"lehr zones create us-east-1a",
					"sudo lehr --control unix:///run/lehr-control/control.sock zones create us-east-1a",
				},
			}},
			{path: "delete", flags: []string{"force"}, doc: doc{
				usage:   "lehr zones delete NAME [--force] [flags]",
				summary: "retire a zone: its goals and reports go",
				about: `Retires zone NAME (fleet admins): its goals and reports go, and rollouts stop
reaching it. A zone whose distributors reported once and stopped holds every
rollout that reaches it (silence is no evidence), so delete a zone retired for
good. Refused while its distributors report, unless --force.`,
				examples: []string{"lehr zones delete us-west-9z", "lehr zones delete us-west-9z --force"},
			}},
			{path: "status", doc: doc{
				usage:   "lehr zones status NAME [flags]",
				summary: "what a zone's distributors last reported",
				about: `Shows what the zone's distributors last reported (every --report-interval of
theirs): how many distributors and agents run each build of Lehr (release
version and commit, as 'lehr version' prints it: an upgrade's progress;
"unknown" for those too old to say), how many agents each distributor serves,
and how many agents hold which version of each namespace, next to the zone's
goal. A distributor that stops reporting drops out after its report expires.`,
				examples: []string{
					"lehr zones status us-east-1a",
					"lehr zones status us-east-1a -o json",
					"lehr zones status us-east-1a -o json | jq '.agent_builds[] | select(.build != \"unknown\")'",
				},
			}},
		},
	})
	cf := addClientFlags(fs, e)
	force := fs.Bool("force", false, "delete even while the zone's distributors report")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return usageError(e, fs, "missing subcommand: list, create, delete or status")
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	switch pos[0] {
	case "list":
		if code, ok := wantArgs(e, fs, pos[1:], 0, "no arguments"); !ok {
			return code
		}
	case "create", "delete", "status":
		if code, ok := wantArgs(e, fs, pos[1:], 1, "zone NAME"); !ok {
			return code
		}
	default:
		return usageError(e, fs, "unknown subcommand %q: want list, create, delete or status", pos[0])
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	defer done()
	if pos[0] == "status" {
		return zoneStatus(ctx, e, fs, cf, c, pos[1])
	}
	if pos[0] == "delete" {
		if err := c.DeleteZone(ctx, pos[1], *force); err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		if cf.json() {
			return printOrFail(e, &lehrpb.Zone{Name: pos[1]}) // the zone deleted
		}
		fmt.Fprintf(e.stdout, "deleted zone %s\n", clean(pos[1]))
		return exitOK
	}
	if pos[0] == "create" {
		z, err := c.CreateZone(ctx, pos[1])
		if err != nil {
			return reportError(e, fs.Name(), err, cf.errCtx(""))
		}
		if cf.json() {
			return printOrFail(e, z)
		}
		fmt.Fprintf(e.stdout, "created zone %s\n", clean(z.GetName()))
		return exitOK
	}
	zs, err := c.ListZones(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(""))
	}
	if cf.json() {
		return printOrFail(e, &lehrpb.ListZonesResponse{Zones: zs})
	}
	writeZones(e.stdout, zs)
	return exitOK
}

func runGoals(ctx context.Context, e *env, args []string) int {
	fs := newFlags("lehr goals", doc{
		usage:   "lehr goals ZONE [--namespace NS] [--watch] [flags]",
		summary: "show the goal states of a zone",
		about: `Shows, for each namespace, the version zone ZONE should be at (its goal
state), with the checksum, when the goal last moved and why. Distributors and
agents converge to these goals.

--watch keeps running and prints every goal change as it happens (one line
each, or one JSON object per message with -o json) until Ctrl-C; it resumes
by itself if the connection to control drops. --timeout does not apply.`,
		examples: []string{
			"lehr goals us-east-1a",
			"lehr goals us-east-1a --namespace demo/app -o json",
			"lehr goals us-east-1a --watch",
		},
	})
	cf := addClientFlags(fs, e)
	ns := fs.String("namespace", "", "show only namespace `NS`")
	watch := fs.Bool("watch", false, "print goal changes as they happen, until interrupted")
	pos, code, ok := parse(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := wantArgs(e, fs, pos, 1, "ZONE"); !ok {
		return code
	}
	if m := cf.check(); m != "" {
		return usageError(e, fs, "%s", m)
	}
	if *watch {
		return watchGoals(ctx, e, fs, cf, pos[0], *ns)
	}
	c, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(*ns))
	}
	defer done()
	g, err := c.GetGoals(ctx, pos[0], *ns)
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(*ns))
	}
	if cf.json() {
		return printOrFail(e, g)
	}
	writeGoals(e.stdout, pos[0], g)
	return exitOK
}

// watchGoals prints a zone's goal changes until ctx is done.
func watchGoals(ctx context.Context, e *env, fs *flags, cf *clientFlags, zone, ns string) int {
	c, err := cf.dial()
	if err != nil {
		return reportError(e, fs.Name(), err, cf.errCtx(ns))
	}
	defer c.Close()
	// The distributors' resumable watch (reconnects, resumes at the next
	// revision, restarts from the current state after a compaction), with
	// every message printed as it arrives.
	w, err := goalwatch.New(goalwatch.Options{
		Zone:   zone,
		Client: c.RPC(),
		Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnMessage: func(m *lehrpb.WatchGoalsResponse) {
			if len(m.GetEvents()) == 0 && !m.GetInitial() {
				return // progress: nothing changed
			}
			if cf.json() {
				_ = printJSON(e.stdout, m)
				return
			}
			writeGoalEvents(e.stdout, m, ns)
		},
	})
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	if err := w.Run(ctx); err != nil {
		return reportError(e, fs.Name(), apierror.FromError(err), cf.errCtx(ns))
	}
	return exitOK // interrupted, as intended
}

// zoneStatus prints "lehr zones status ZONE".
func zoneStatus(ctx context.Context, e *env, fs *flags, cf *clientFlags, c *producer.Client, zone string) int {
	st, err := c.RPC().GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: zone})
	if err != nil {
		perr := apierror.FromError(err)
		if perr.Code == codes.Unimplemented {
			fmt.Fprintf(e.stderr, "%s: control at %s does not implement GetZoneStatus (it is older than this lehr); upgrade control, or use 'lehr goals %s' for the goals alone\n", fs.Name(), cf.control, zone)
			return exitError
		}
		return reportError(e, fs.Name(), fmt.Errorf("zone status %s: %w", zone, perr), cf.errCtx(""))
	}
	// The goals give the status meaning ("3 of 4 agents at the goal"); a
	// failure to read them only drops that column.
	goals := map[string]uint64{}
	g, gerr := c.GetGoals(ctx, zone, "")
	for _, s := range g.GetGoals() {
		goals[s.GetNamespace()] = s.GetVersion()
	}
	if cf.json() {
		return printOrFail(e, st)
	}
	writeZoneStatus(e.stdout, st, goals, gerr == nil)
	return exitOK
}
