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
