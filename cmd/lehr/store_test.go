package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/control"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/wait"
)

func TestWriteStoreStatusGolden(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	st := &lehrpb.StoreStatus{
		SizeBytes: 900 << 20, InUseBytes: 700 << 20, QuotaBytes: 1 << 30, ReserveBytes: 200 << 20, HighWaterBytes: 824 << 20, FairShareBytes: 412 << 20,
		Revision: 48213, ReadTime: timestamppb.New(now.Add(-400 * time.Millisecond)),
		Domains: []*lehrpb.DomainStoredBytes{
			{Domain: "pay", StoredBytes: 600 << 20, MaxStoredBytes: 1 << 30},
			{Domain: "shop", StoredBytes: 12 << 10, MaxStoredBytes: 256 << 20},
			{Domain: "new", MaxStoredBytes: 256 << 20},
		},
	}
	var b bytes.Buffer
	writeStoreStatus(&b, st, now)
	b.WriteString("--- free pages left to control's next start\n")
	st.DefragmentAtStart, st.SizeBytes = true, 800<<20
	writeStoreStatus(&b, st, now)
	b.WriteString("--- under the NOSPACE alarm\n")
	st.NospaceAlarm = true
	writeStoreStatus(&b, st, now)
	b.WriteString("--- before control read etcd's status\n")
	writeStoreStatus(&b, &lehrpb.StoreStatus{}, now)
	golden(t, "store-status", b.Bytes())
}

// "lehr store" shows the store's quota and marks as control configured
// them and what each domain stores, most first.
func TestStoreStatus(t *testing.T) {
	srv := controltest.StartControl(t, control.Options{StoreQuota: 256 << 20})
	c := cli{t: t, addr: srv.Addr}
	c.ok("domain", "create", "pay")
	c.ok("domain", "create", "shop")
	if code, _, errOut := c.run(`{"limit": "100"}`, "push", "pay/limits", "--file", "-"); code != exitOK {
		t.Fatalf("push: exit %d\n%s", code, errOut)
	}
	var st struct {
		QuotaBytes     int64  `json:"quota_bytes"`
		HighWaterBytes int64  `json:"high_water_bytes"`
		FairShareBytes int64  `json:"fair_share_bytes"`
		ReadTime       string `json:"read_time"`
		Domains        []struct {
			Domain         string `json:"domain"`
			StoredBytes    int64  `json:"stored_bytes"`
			MaxStoredBytes int64  `json:"max_stored_bytes"`
		} `json:"domains"`
	}
	num := func(n int64) int64 { return n } // sizes are JSON numbers
	// The space monitor reads etcd's status and counts the domains every
	// second.
	wait.Until(t, "lehr store to count both domains", func() error {
		if err := json.Unmarshal([]byte(c.ok("store", "-o", "json")), &st); err != nil {
			return err
		}
		if st.ReadTime == "" || num(st.FairShareBytes) != num(st.HighWaterBytes)/2 {
			return fmt.Errorf("read at %q, fair share %d of high water %d", st.ReadTime, st.FairShareBytes, st.HighWaterBytes)
		}
		return nil
	})
	if num(st.QuotaBytes) != 256<<20 || num(st.HighWaterBytes) >= num(st.QuotaBytes) {
		t.Errorf("quota %d, high water %d; want the configured 256 MiB and a mark under it", st.QuotaBytes, st.HighWaterBytes)
	}
	if len(st.Domains) != 2 || st.Domains[0].Domain != "pay" || num(st.Domains[0].StoredBytes) <= 0 || st.Domains[1].Domain != "shop" || num(st.Domains[1].StoredBytes) != 0 {
		t.Errorf("domains %+v; want pay storing something, then shop storing nothing", st.Domains)
	}
	if num(st.Domains[0].MaxStoredBytes) != 256<<20 {
		t.Errorf("pay's stored-bytes quota %d; want the default 256 MiB", st.Domains[0].MaxStoredBytes)
	}
	out := c.ok("store")
	mustContain(t, "lehr store", out, "of its 256.0 MiB quota", "new content refused above", "DOMAIN", "pay", "shop")
	if code, _, errOut := c.run("", "store", "compact"); code != exitUsage {
		t.Errorf("lehr store compact: exit %d, want %d (usage)\n%s", code, exitUsage, errOut)
	}
}
