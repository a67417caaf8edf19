package service

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/proto/lehrpb"
)

// GetStoreStatus returns the store's size against its quota and marks, as
// control last read etcd's status, and what each domain stores, most
// first. Every user may read it.
func (s *Service) GetStoreStatus(ctx context.Context, _ *lehrpb.GetStoreStatusRequest) (_ *lehrpb.StoreStatus, err error) {
	defer s.track(ctx, "GetStoreStatus", time.Now(), &err)
	ds, stored, err := s.st.DomainsStored(ctx)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	sp := s.st.Space()
	out := &lehrpb.StoreStatus{
		SizeBytes: sp.DBSize, InUseBytes: sp.DBSizeInUse, QuotaBytes: sp.Quota, ReserveBytes: sp.Reserve,
		HighWaterBytes: sp.HighWater, FairShareBytes: sp.FairShare(), NospaceAlarm: sp.Alarm, Revision: sp.Revision,
		DefragmentAtStart: sp.DefragAtStart,
	}
	if sp.Known {
		out.ReadTime = timestamppb.New(sp.ReadAt)
	}
	for _, d := range ds {
		out.Domains = append(out.Domains, &lehrpb.DomainStoredBytes{Domain: d.GetName(), StoredBytes: stored[d.GetName()],
			MaxStoredBytes: s.effectiveQuotas(d.GetQuotas()).GetMaxStoredBytes()})
	}
	slices.SortFunc(out.Domains, func(a, b *lehrpb.DomainStoredBytes) int {
		return cmp.Or(cmp.Compare(b.GetStoredBytes(), a.GetStoredBytes()), cmp.Compare(a.GetDomain(), b.GetDomain()))
	})
	return out, nil
}
