package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Domain quotas. A zero field of a domain's quotas is the server's default
// (Options.DomainDefaults, else DefaultQuotas); GetDomain shows the
// quotas in force as effective_quotas. Only a fleet admin may give a
// domain a quota above the default, so that a user who creates a domain
// — every user may — cannot grant it the store.

// DefaultQuotas returns the quotas of a domain that sets none, sized so
// that the embedded store's default quota (8 GiB, a fifth of it kept for
// the safety path) holds 25 default domains filled to their quota, and so
// that one domain publishing large versions at its limits costs another
// domain's one-key patch little: at 2 MiB/s of new content an 8 MiB
// snapshot flood took the patch from 8 to 15 ms p50 on the isolation
// bench's 2 cores, at 8 MiB/s to 108 ms p90 (bench/results/HISTORY.md,
// "Isolation"; docs/operations.md, "Quotas").
func DefaultQuotas() *lehrpb.Quotas {
	return &lehrpb.Quotas{
		MaxNamespaceBytes:      validate.MaxNamespaceBytes,
		MaxProperties:          validate.MaxProperties,
		MaxValueBytes:          validate.MaxValueBytes,
		PublishesPerSecond:     10,
		PublishBurst:           20,
		PublishBytesPerSecond:  2 << 20, // a burst of at least 32 MiB: any version at once
		OutboundBytesPerSecond: 128 << 20,
		MaxNamespaces:          1000,
		MaxStoredBytes:         256 << 20,
	}
}

// effectiveQuotas returns q with every zero field replaced by the
// server's default.
func (s *Service) effectiveQuotas(q *lehrpb.Quotas) *lehrpb.Quotas {
	out := proto.CloneOf(s.defQuotas)
	if q == nil {
		return out
	}
	set := out.ProtoReflect()
	q.ProtoReflect().Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		set.Set(f, v) // Range visits the fields that are set: non-zero
		return true
	})
	return out
}

// domainLimits are what store.Commit enforces for d.
func (s *Service) domainLimits(d *lehrpb.Domain) store.DomainLimits {
	q := s.effectiveQuotas(d.GetQuotas())
	s.metrics.GetOrCreateGauge(fmt.Sprintf(`lehr_control_domain_max_stored_bytes{domain=%q}`, d.GetName()), nil).Set(float64(q.GetMaxStoredBytes()))
	return store.DomainLimits{
		StoredBytes:           q.GetMaxStoredBytes(),
		PublishesPerSecond:    q.GetPublishesPerSecond(),
		PublishBurst:          int(q.GetPublishBurst()),
		PublishBytesPerSecond: q.GetPublishBytesPerSecond(),
	}
}

// withUsage returns d with its usage and effective quotas filled in.
func (s *Service) withUsage(ctx context.Context, d *lehrpb.Domain) (*lehrpb.Domain, error) {
	stored, nss, err := s.st.DomainUsage(ctx, d.GetName())
	if err != nil {
		return nil, err
	}
	d = proto.CloneOf(d)
	d.Usage = &lehrpb.DomainUsage{StoredBytes: stored, Namespaces: int32(min(nss, 1<<31-1))}
	d.EffectiveQuotas = s.effectiveQuotas(d.GetQuotas())
	return d, nil
}

// checkQuotaRaise refuses, unless the caller is a fleet admin, a quota in
// q above the server's default.
func (s *Service) checkQuotaRaise(ctx context.Context, field string, q *lehrpb.Quotas) error {
	if q == nil || s.fleetAdmin(ctx) {
		return nil
	}
	def := s.defQuotas.ProtoReflect()
	var err error
	q.ProtoReflect().Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		// A default of 0 is no limit: every value is below it.
		dv, above := def.Get(f), false
		switch f.Kind() {
		case protoreflect.DoubleKind:
			above = dv.Float() > 0 && v.Float() > dv.Float()
		case protoreflect.Int32Kind, protoreflect.Int64Kind:
			above = dv.Int() > 0 && v.Int() > dv.Int()
		}
		if above {
			err = apierror.New(codes.PermissionDenied, apierror.ReasonPermissionDenied, field+"."+string(f.Name()),
				"%s %v is above the server's default of %v: only a fleet admin may raise a domain's quota above the default (lehr control --fleet-admins NAME, or the user control runs as, on its --socket); leave it 0 for the default or ask a fleet admin",
				f.Name(), v.Interface(), dv.Interface())
			return false
		}
		return true
	})
	return err
}

// quotaError is the API error of a domain quota the store refused.
func quotaError(e *store.QuotaError) *apierror.Error {
	return apierror.New(codes.ResourceExhausted, apierror.ReasonQuotaExceeded, "",
		"domain %s stores %s of its %s quota (quotas.max_stored_bytes) and the version would add %s: free space with 'lehr history compact NAMESPACE --keep N' (removes old versions), publish less history, or ask a fleet admin to raise it ('lehr domain update %s --max-stored-bytes SIZE')",
		e.Domain, humanize.IBytes(uint64(e.Used)), humanize.IBytes(uint64(e.Limit)), humanize.IBytes(uint64(e.Adding)), e.Domain).
		WithLimit("%d bytes", e.Limit)
}

// spaceError is the API error of the store above its high-water mark.
func spaceError(e *store.SpaceError) *apierror.Error {
	if e.Alarm {
		return apierror.New(codes.ResourceExhausted, apierror.ReasonStoreFull, "",
			"the store is out of space: etcd refuses writes (its NOSPACE alarm; the quota is %s); control is compacting and defragmenting it and disarms the alarm once there is room; free space with 'lehr history compact NAMESPACE --keep N' or raise the store's quota ('lehr control --store-quota SIZE')",
			humanize.IBytes(uint64(e.Quota))).WithLimit("%d bytes", e.Quota)
	}
	if e.FairShare > 0 {
		return apierror.New(codes.ResourceExhausted, apierror.ReasonStoreFull, "",
			"the store holds %s of its %s quota, above its high-water mark of %s, and domain %s holds %s, more than its fair share of the store (%s: the mark over every domain): its new content is refused until space is freed, while domains within their share publish on — 'lehr history compact NAMESPACE --keep N' removes old versions (control then gives the space back by itself), or raise the store's quota ('lehr control --store-quota SIZE'); rollbacks still work",
			humanize.IBytes(uint64(e.Used)), humanize.IBytes(uint64(e.Quota)), humanize.IBytes(uint64(e.HighWater)),
			e.Domain, humanize.IBytes(uint64(e.DomainBytes)), humanize.IBytes(uint64(e.FairShare))).
			WithLimit("%d bytes", e.FairShare)
	}
	return apierror.New(codes.ResourceExhausted, apierror.ReasonStoreFull, "",
		"the store holds %s of its %s quota, above what new content may use (the rest is kept for rollbacks, goal moves and the audit log): new content is refused until space is freed — 'lehr history compact NAMESPACE --keep N' removes old versions (control then gives the space back by itself), or raise the store's quota ('lehr control --store-quota SIZE'); rollbacks still work",
		humanize.IBytes(uint64(e.Used)), humanize.IBytes(uint64(e.Quota))).
		WithLimit("%d bytes", e.Limit)
}

// admitContent refuses a write of a small record of new content (a
// domain, a namespace, a policy, an experiment) while the store is above
// its high-water mark.
func (s *Service) admitContent(m proto.Message) error {
	return s.st.AdmitContent(int64(proto.Size(m)))
}

// rateHints remembers, per domain, until when its publish bucket is
// known to be empty — from a commit the store refused for the rate — so
// that a caller retrying at once is refused before any etcd read: the
// bucket only refills with time (refunds do not exist), so every publish
// of the domain before then would be refused all the same. A raised rate
// takes effect at the hint's end, at most the wait one refusal said.
type rateHints struct {
	mu    sync.Mutex
	until map[string]time.Time
	last  map[string]*store.RateError
}

// note records a refusal for the rate.
func (h *rateHints) note(e *store.RateError, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until, h.last = map[string]time.Time{}, map[string]*store.RateError{}
	}
	if len(h.until) > 10_000 { // domains refused lately: forget the expired
		for d, t := range h.until {
			if !now.Before(t) {
				delete(h.until, d)
				delete(h.last, d)
			}
		}
	}
	h.until[e.Domain], h.last[e.Domain] = now.Add(e.Wait), e
}

// check refuses a publish of domain while its bucket is known empty.
func (h *rateHints) check(domain string, now time.Time) *store.RateError {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.until[domain]; ok && now.Before(t) {
		e := *h.last[domain]
		e.Wait = t.Sub(now)
		return &e
	}
	return nil
}

// checkRate refuses, before anything is read, a publish to ns while its
// domain's bucket is known empty (rateHints).
func (s *Service) checkRate(ctx context.Context, ns string) error {
	d, _, _ := names.Namespace(ns)
	if e := s.rates.check(d, s.now()); e != nil {
		return s.apiError(ctx, e)
	}
	return nil
}
