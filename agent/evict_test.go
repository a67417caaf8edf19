package agent_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"lehr.dev/lehr/agent"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

// A namespace no lease has held for Options.CacheRetention leaves the
// cache, the agent's state and its metric series, so an agent whose
// consumers come and go over months neither grows without bound nor
// announces what it no longer needs (issue 8, defects 5 and 8).
func TestUnwantedNamespacesAreEvicted(t *testing.T) {
	h := newHarness(t, 1)
	r := h.startAgent(dataDir(t), h.addrs(), func(o *agent.Options) {
		o.UnsubscribeGrace = -1 // unsubscribe at once
		o.CacheRetention = 300 * time.Millisecond
	})
	var nss []string
	for i := range 12 {
		ns := fmt.Sprintf("%s/churn-%02d", domain, i)
		nss = append(nss, ns)
		v := h.publish(ns, map[string]string{"i": fmt.Sprint(i)})
		sub := subscribe(t, r, ns)
		waitFile(t, sub.GetPath(), v.GetSeq(), map[string]string{"i": fmt.Sprint(i)})
		if _, err := r.api.Unsubscribe(ctx(t), &lehrpb.UnsubscribeRequest{LeaseId: sub.GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, "every unwanted namespace to be evicted", func() error {
		st, err := r.api.Status(ctx(t), &lehrpb.StatusRequest{})
		if err != nil {
			return err
		}
		if n := len(st.GetNamespaces()); n != 0 {
			return fmt.Errorf("%d namespaces still known, first %s", n, st.GetNamespaces()[0].GetNamespace())
		}
		return nil
	})
	for _, ns := range nss {
		if _, err := r.api.Get(ctx(t), &lehrpb.AgentGetRequest{Namespace: ns}); err == nil {
			t.Errorf("Get(%s) after eviction succeeded; want it gone from the cache", ns)
		}
	}
	var buf bytes.Buffer
	r.a.Metrics().WritePrometheus(&buf)
	if strings.Contains(buf.String(), "churn-") {
		t.Errorf("metric series of evicted namespaces remain:\n%s", grepLines(buf.String(), "churn-"))
	}
	if got := counter(r, "lehr_agent_cache_evictions_total"); got != uint64(len(nss)) {
		t.Errorf("lehr_agent_cache_evictions_total = %d, want %d", got, len(nss))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
