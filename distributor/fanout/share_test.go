package fanout

import "testing"

// Each distributor's part of a domain's per-zone quotas.
func TestQuotaShares(t *testing.T) {
	for _, tc := range []struct {
		p        DomainPolicy
		share    int
		out      int64
		subs     int
		describe string
	}{
		{DomainPolicy{}, 3, 0, 0, "no quotas"},
		{DomainPolicy{OutboundBytesPerSecond: 300_000, MaxSubscriptions: 30}, 1, 300_000, 30, "alone"},
		{DomainPolicy{OutboundBytesPerSecond: 300_000, MaxSubscriptions: 30}, 3, 100_000, 10, "a third each"},
		{DomainPolicy{OutboundBytesPerSecond: 2, MaxSubscriptions: 2}, 3, 1, 1, "never below one"},
	} {
		if got := tc.p.outbound(tc.share); got != tc.out {
			t.Errorf("%s: outbound(%d) = %d; want %d", tc.describe, tc.share, got, tc.out)
		}
		if got := tc.p.subscriptions(tc.share); got != tc.subs {
			t.Errorf("%s: subscriptions(%d) = %d; want %d", tc.describe, tc.share, got, tc.subs)
		}
	}
}
