package store

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// The audit log reads back in time order, filtered by domain and time,
// page by page without gaps or repeats.
func TestAuditRecordsPages(t *testing.T) {
	s := newTestStore(t, Options{})
	ctx := testCtx(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 7 {
		d := []string{"pay", "ops"}[i%2]
		rec := &lehrpb.AuditRecord{Time: timestamppb.New(t0.Add(time.Duration(i) * time.Second)), Method: "Publish", Target: fmt.Sprintf("%s/n%d", d, i), Domain: d}
		if err := s.AppendAudit(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		recs, next, err := s.AuditRecords(ctx, "pay", t0.Add(time.Second), token, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got = append(got, r.GetTarget())
		}
		if token = next; token == "" || pages > 10 {
			break
		}
	}
	if fmt.Sprint(got) != "[pay/n2 pay/n4 pay/n6]" {
		t.Errorf("pay's records since t0+1s, a page at a time = %v; want pay/n2, pay/n4, pay/n6", got)
	}
}

// The audit log keeps at most Retention.AuditRecords records: trimming
// removes the oldest beyond it, whatever their age (issue 27: kept 90
// days, the log grew with the fleet's deploy rate).
func TestTrimAuditKeepsTheNewest(t *testing.T) {
	s := newTestStore(t, Options{Retention: Retention{AuditRecords: 5}})
	ctx := testCtx(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []*lehrpb.AuditRecord
	for i := range 12 {
		recs = append(recs, &lehrpb.AuditRecord{Time: timestamppb.New(t0.Add(time.Duration(i) * time.Second)), Method: "Publish", Target: fmt.Sprintf("pay/n%d", i), Domain: "pay"})
	}
	if err := s.AppendAudit(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	n, err := s.TrimAudit(ctx)
	if err != nil || n != 7 {
		t.Fatalf("TrimAudit = %d, %v; want 7 removed", n, err)
	}
	left, _, err := s.AuditRecords(ctx, "", time.Time{}, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range left {
		got = append(got, r.GetTarget())
	}
	if fmt.Sprint(got) != "[pay/n7 pay/n8 pay/n9 pay/n10 pay/n11]" {
		t.Errorf("left after trimming: %v; want the 5 newest", got)
	}
	if n, err := s.TrimAudit(ctx); err != nil || n != 0 {
		t.Errorf("TrimAudit at the bound = %d, %v; want 0", n, err)
	}
}
