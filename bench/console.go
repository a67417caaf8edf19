package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control"
	"lehr.dev/lehr/proto/lehrpb"
)

func consoleScenario() Scenario {
	return Scenario{
		Name:  "console",
		Title: "the operator console's pages against a big fleet: fleet and namespace pages, HTML and JSON, with 10,000 agents in 10 zones and 5,000 namespaces (issue 32)",
		Run:   runConsole,
	}
}

// consoleTarget is issue 32's bound on a page's render time.
const consoleTarget = 200 * time.Millisecond

// consoleLoads is how many times each page is fetched.
const consoleLoads = 30

func runConsole(ctx context.Context, e *Env) (*Result, error) {
	type size struct{ zones, agentsPerZone, namespaces int }
	sz := pick(e.Profile, size{2, 50, 100}, size{4, 250, 1000}, size{10, 1000, 5000})
	res := &Result{
		Setup: fmt.Sprintf("control in the bench process on embedded etcd, its HTTP listener on loopback serving the console (plaintext, "+
			"dev mode: the reads the console makes are the caller's gRPC calls through the gateway's in-process connection, as in "+
			"production); %d namespaces of one domain published once each; %d zones, each with one distributor's report (ReportZoneStatus, "+
			"the real API; the report's content is synthetic) of %d agents holding every namespace, each namespace with its consumers "+
			"and two services. Each page fetched %d times in a row by one client after one warm-up fetch; the time is the whole "+
			"HTTP request, read to its end.", sz.namespaces, sz.zones, sz.agentsPerZone, consoleLoads),
	}
	dir, err := os.MkdirTemp(e.Dir, "console-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rc, err := startControl(ctx, dir, e.Log, true, func(o *control.Options) {
		o.HTTPListen, o.CompactInterval = "127.0.0.1:0", -1
	})
	if err != nil {
		return nil, err
	}
	defer rc.close()
	p, err := rc.producer(e.Log)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	names := make([]string, sz.namespaces)
	seqs := make([]uint64, sz.namespaces)
	if err := parallel(ctx, 8, sz.namespaces, func(i int) error {
		names[i] = fmt.Sprintf("%s/page-%05d", benchDomain, i)
		v, err := p.Publish(ctx, names[i], []producer.Property{{Key: "k", Value: []byte("v")}})
		seqs[i] = v.GetSeq()
		return err
	}); err != nil {
		return nil, err
	}
	api := p.RPC()
	zones := []string{benchZone}
	for z := 1; z < sz.zones; z++ {
		name := fmt.Sprintf("zone-%c", 'a'+z)
		if _, err := p.CreateZone(ctx, name); err != nil {
			return nil, err
		}
		zones = append(zones, name)
	}
	for _, z := range zones {
		req := &lehrpb.ReportZoneStatusRequest{Zone: z, DistributorId: z + "-d0", Agents: int32(sz.agentsPerZone), TtlSeconds: 120,
			DistributorBuild: "bench", AgentBuilds: []*lehrpb.BuildCount{{Build: "bench", Count: int32(sz.agentsPerZone)}}}
		for i, ns := range names {
			// Every agent holds every namespace; consumers of two
			// services on each.
			req.Versions = append(req.Versions, &lehrpb.VersionCount{Namespace: ns, Version: seqs[i], Agents: int32(sz.agentsPerZone),
				Consumers: uint32(3 * sz.agentsPerZone), Services: []*lehrpb.ServiceConsumers{
					{Service: "checkout", Consumers: uint32(2 * sz.agentsPerZone)}, {Service: "search", Consumers: uint32(sz.agentsPerZone)}}})
		}
		if _, err := api.ReportZoneStatus(ctx, req); err != nil {
			return nil, fmt.Errorf("report %s: %w", z, err)
		}
	}
	base := "http://" + rc.c.HTTPAddr().String() + "/console"
	client := &http.Client{Timeout: time.Minute}
	fetch := func(u string) (time.Duration, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		return took, int(n), err
	}
	ns := names[len(names)/2]
	for _, pg := range []struct{ name, path string }{
		{"fleet", "/"},
		{"fleet, JSON", "/?format=json"},
		{"namespace", "/namespaces/" + ns},
		{"namespace, JSON", "/namespaces/" + ns + "?format=json"},
	} {
		if _, _, err := fetch(base + pg.path); err != nil { // warm-up
			return res, err
		}
		var samples []time.Duration
		size := 0
		for range consoleLoads {
			d, n, err := fetch(base + pg.path)
			if err != nil {
				return res, err
			}
			samples = append(samples, d)
			size = n
		}
		s := Summarize(samples)
		res.Rows = append(res.Rows, *(&Row{System: "lehr-console", Case: fmt.Sprintf("%s page, %d agents in %d zones, %d namespaces", pg.name, sz.zones*sz.agentsPerZone, sz.zones, sz.namespaces)}).
			AddLatency("", s).Add("size", float64(size)/1024, "KiB"))
		if pg.name == "fleet" || pg.name == "namespace" {
			res.Targets = append(res.Targets, Target{Goal: fmt.Sprintf("%s page <= %v with %d agents and %d namespaces", pg.name, consoleTarget, sz.zones*sz.agentsPerZone, sz.namespaces),
				Got: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms", ms(s.P50), ms(s.P99)), Met: s.P99 <= consoleTarget})
		}
	}
	return res, nil
}
