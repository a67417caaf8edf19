package service

// Policy preview (AIP-236): experiments of a policy namespace. See
// proto/lehr/v1/preview.proto for the contract and docs/preview.md for the
// design: experiments live in etcd (control/store, experiments.go); the
// active ones are mirrored into the policy's preview namespace
// ("<ns>--preview", one property per experiment), which reaches every host
// through the ordinary distribution path; hosts evaluate them beside the
// live rules and count; Commit makes an experiment's rules the live
// policy's next version and deletes the experiment in one transaction.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/canary"
	"lehr.dev/lehr/control/previewhist"
	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/internal/signals"
	"lehr.dev/lehr/preview"
	"lehr.dev/lehr/proto/lehrpb"
)

// previewStore is the part of the store (*store.Store) the policy-preview
// handlers of this file call: a policy's head and versions (and Commit for
// the live and preview namespaces), its experiments, and the zone status
// their counts are summed from. Each method's contract is that of the
// *store.Store method of the same name. The Service's shared helpers the
// handlers also use (domainOf, apiError, the audit log) reach the rest of
// the store through Service.st.
type previewStore interface {
	GetNamespace(ctx context.Context, ns string) (*lehrpb.Namespace, error)
	Content(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, content.Snapshot, error)
	Version(ctx context.Context, ns string, seq uint64) (*lehrpb.VersionInfo, error)
	Commit(ctx context.Context, c store.Commit) (*lehrpb.VersionInfo, error)

	CreateExperiment(ctx context.Context, ns, id string, e *lehrpb.PolicyExperiment, maxPerPolicy int) (*store.StoredExperiment, error)
	Experiment(ctx context.Context, ns, id string) (*store.StoredExperiment, error)
	Experiments(ctx context.Context, ns, preview string) (store.PreviewState, error)
	PutExperiment(ctx context.Context, ns, id string, e *lehrpb.PolicyExperiment, modRevision int64) (*store.StoredExperiment, error)
	DeleteExperiment(ctx context.Context, ns, id string, modRevision int64) error
	ExperimentHistory(ctx context.Context, ns, id string) (store.StoredHistory, error)

	ListZones(ctx context.Context) ([]*lehrpb.Zone, error)
	ZoneStatus(ctx context.Context, zone string) ([]*lehrpb.DistributorStatus, error)
}

// MaxExperimentsPerPolicy is the cap on experiments per live policy
// (AIP-236 asks for a documented cap).
const MaxExperimentsPerPolicy = 5

// defaultExperimentPage is ListPolicyExperiments' page size when none is asked.
const defaultExperimentPage = 100

// LogPrefix begins every decision log line of a preview: the AIP's
// predefined constant for Lehr's Policy type (preview.LogPrefix).
const LogPrefix = preview.LogPrefix

// Limits of an experiment's annotations, and of an update's mask (the
// fields an update may name: "*", "policy", "policy.rules" and
// "annotations").
const (
	maxAnnotations      = 64
	maxAnnotationKey    = 63
	maxAnnotationsBytes = 4 << 10
	maxExperimentMask   = 4
)

// PolicyName returns the resource name of policy namespace ns
// ("payments/fw" → "domains/payments/policies/fw").
func PolicyName(ns string) string { return names.PolicyResource(ns) }

// ExperimentName returns the resource name of experiment id of ns.
func ExperimentName(ns, id string) string { return names.ExperimentResource(ns, id) }

// parsePolicyName maps "domains/{d}/policies/{p}" to the namespace "d/p".
func parsePolicyName(field, name string) (string, error) {
	rest, ok := strings.CutPrefix(name, names.PolicyResourcePrefix)
	d, p, ok2 := strings.Cut(rest, names.PoliciesSegment)
	if name == "" {
		return "", invalid(apierror.ReasonInvalidArgument, field, `%s is required: a policy's name, "domains/{domain}/policies/{policy}"`, field)
	}
	if !ok || !ok2 {
		return "", invalid(apierror.ReasonInvalidName, field, `%s is not a policy name; want "domains/{domain}/policies/{policy}" (the policy namespace "{domain}/{policy}")`, excerpt.Quote(name))
	}
	ns := d + "/" + p
	if _, _, err := names.Namespace(ns); err != nil {
		return "", nameError(field, err)
	}
	if names.IsPreview(ns) {
		return "", userNamespace(field, ns)
	}
	return ns, nil
}

// parseExperimentName maps "domains/{d}/policies/{p}/experiments/{e}" to
// the namespace "d/p" and the id "e".
func parseExperimentName(field, name string) (ns, id string, err error) {
	if name == "" {
		return "", "", invalid(apierror.ReasonInvalidArgument, field, `%s is required: "domains/{domain}/policies/{policy}/experiments/{experiment}"`, field)
	}
	parent, id, ok := strings.Cut(name, names.ExperimentsSegment)
	if !ok {
		return "", "", invalid(apierror.ReasonInvalidName, field, `%s is not an experiment name; want "domains/{domain}/policies/{policy}/experiments/{experiment}"`, excerpt.Quote(name))
	}
	if ns, err = parsePolicyName(field, parent); err != nil {
		return "", "", err
	}
	if err := names.Experiment(id); err != nil {
		return "", "", nameError(field, err)
	}
	return ns, id, nil
}

// policyHead reads ns's head and checks it is a policy namespace.
func (s *Service) policyHead(ctx context.Context, field, ns string) (*lehrpb.Namespace, error) {
	head, err := s.previews.GetNamespace(ctx, ns)
	if err != nil {
		e := withField(s.apiError(ctx, err), field)
		if e.Code == codes.NotFound {
			e.Message += "; to preview a new policy, publish it first with no rules (the no-op policy: kind policy, no properties)"
		}
		return nil, e
	}
	if head.GetKind() != lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY {
		return nil, apierror.New(codes.FailedPrecondition, apierror.ReasonKindMismatch, field,
			"namespace %s is of kind %s; experiments exist only under policy namespaces", ns, head.GetKind())
	}
	if dt := head.GetDeleteTime(); dt != nil {
		return nil, apierror.New(codes.NotFound, apierror.ReasonNotFound, field,
			"policy %s was deleted at %s (version %d is the no-op policy); publishing rules to it, or rolling back to a version before, creates it again",
			ns, dt.AsTime().UTC().Format(time.RFC3339), head.GetLatestVersion())
	}
	if _, _, err := names.Namespace(names.Preview(ns)); err != nil {
		return nil, invalid(apierror.ReasonInvalidName, field,
			"policy %s has a name too long to preview: its preview namespace %q would exceed %d bytes", ns, names.Preview(ns), names.MaxNameLen)
	}
	return head, nil
}

// checkExperimentPolicy checks an experiment's policy: its name is the
// live policy's and its rules are what a publish to ns would accept.
func (s *Service) checkExperimentPolicy(ctx context.Context, field string, head *lehrpb.Namespace, p *lehrpb.Policy) ([]content.Property, error) {
	want := PolicyName(head.GetName())
	switch {
	case p == nil:
		return nil, invalid(apierror.ReasonInvalidArgument, field, "%s is required: the policy under test, named %q (no rules previews a deletion)", field, want)
	case p.GetName() == "":
		return nil, invalid(apierror.ReasonInvalidArgument, field+".name", "%s.name is required: the live policy's name, %q", field, want)
	case p.GetName() != want:
		return nil, invalid(apierror.ReasonInvalidArgument, field+".name", "%s.name is %s; an experiment's policy is named as the live policy, %q, and that name never changes", field, excerpt.Quote(p.GetName()), want)
	}
	d, _, _ := strings.Cut(head.GetName(), "/")
	dom, err := s.domainOf(ctx, d, field+".name")
	if err != nil {
		return nil, err
	}
	props, _, err := checkSnapshot(field+".rules", p.GetRules(), validate.ForDomain(dom.GetQuotas()))
	if err != nil {
		return nil, err
	}
	if err := s.runValidators(ctx, head, props, keyFields(field+".rules", props)); err != nil {
		return nil, err
	}
	return props, nil
}

// checkAnnotations checks an experiment's annotations.
func checkAnnotations(field string, a map[string]string) error {
	if len(a) > maxAnnotations {
		return invalid(apierror.ReasonInvalidArgument, field, "%d annotations; at most %d allowed", len(a), maxAnnotations).WithLimit("%d entries", maxAnnotations)
	}
	total := 0
	for k, v := range a {
		switch {
		case k == "" || len(k) > maxAnnotationKey:
			return invalid(apierror.ReasonInvalidArgument, field, "annotation key %s: want 1 to %d bytes", excerpt.Quote(k), maxAnnotationKey)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return invalid(apierror.ReasonInvalidArgument, field, "annotation %s is not valid UTF-8", excerpt.Quote(k))
		}
		total += len(k) + len(v)
	}
	if total > maxAnnotationsBytes {
		return invalid(apierror.ReasonInvalidArgument, field, "annotations hold %d bytes; at most %d allowed", total, maxAnnotationsBytes).WithLimit("%d bytes", maxAnnotationsBytes)
	}
	return nil
}

// operation wraps a completed operation's response and metadata. Every
// operation of this API is done when returned (preview.proto).
func operation(meta, resp proto.Message) (*longrunningpb.Operation, error) {
	var id [8]byte
	rand.Read(id[:])
	m, err := anypb.New(meta)
	if err != nil {
		return nil, fmt.Errorf("operation metadata: %w", err)
	}
	r, err := anypb.New(resp)
	if err != nil {
		return nil, fmt.Errorf("operation response: %w", err)
	}
	return &longrunningpb.Operation{
		Name:     "operations/" + hex.EncodeToString(id[:]),
		Metadata: m,
		Done:     true,
		Result:   &longrunningpb.Operation_Response{Response: r},
	}, nil
}

// GetPolicy returns a policy namespace's live rules and etag.
func (s *Service) GetPolicy(ctx context.Context, req *lehrpb.GetPolicyRequest) (_ *lehrpb.Policy, err error) {
	defer s.track(ctx, "GetPolicy", time.Now(), &err)
	ns, err := parsePolicyName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	head, err := s.policyHead(ctx, "name", ns)
	if err != nil {
		return nil, err
	}
	info, snap, err := s.previews.Content(ctx, ns, head.GetLatestVersion())
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.Policy{Name: req.GetName(), Rules: content.ToProto(snap.Props()), Etag: preview.LiveEtag(info.GetSeq())}, nil
}

// CreatePolicyExperiment stores a new experiment (SUSPENDED in effect: no
// preview_metadata until the first StartPreview).
func (s *Service) CreatePolicyExperiment(ctx context.Context, req *lehrpb.CreatePolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "CreatePolicyExperiment", time.Now(), &err)
	start := s.now()
	ns, err := parsePolicyName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	id := req.GetPolicyExperimentId()
	if id == "" {
		return nil, invalid(apierror.ReasonInvalidArgument, "policy_experiment_id", "policy_experiment_id is required: the experiment's id, e.g. \"deny-eu\"")
	}
	if err := names.Experiment(id); err != nil {
		return nil, nameError("policy_experiment_id", err)
	}
	in := req.GetPolicyExperiment()
	if in == nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "policy_experiment", "policy_experiment is required")
	}
	if err := checkAudit(ctx, "", ""); err != nil {
		return nil, err
	}
	head, err := s.policyHead(ctx, "parent", ns)
	if err != nil {
		return nil, err
	}
	if _, err := s.checkExperimentPolicy(ctx, "policy_experiment.policy", head, in.GetPolicy()); err != nil {
		return nil, err
	}
	if err := checkAnnotations("policy_experiment.annotations", in.GetAnnotations()); err != nil {
		return nil, err
	}
	now := timestamppb.New(s.now())
	e := &lehrpb.PolicyExperiment{
		Name:        ExperimentName(ns, id),
		Policy:      &lehrpb.Policy{Name: PolicyName(ns), Rules: in.GetPolicy().GetRules()},
		Annotations: in.GetAnnotations(),
		CreateTime:  now,
		UpdateTime:  now,
		Author:      s.attribute(ctx, "").author,
	}
	e.Etag = preview.ExperimentEtag(e)
	if err := s.admitContent(e); err != nil {
		return nil, err
	}
	if _, err := s.previews.CreateExperiment(ctx, ns, id, e, MaxExperimentsPerPolicy); err != nil {
		var ce *store.ExperimentCapError
		if errors.As(err, &ce) {
			return nil, apierror.New(codes.ResourceExhausted, apierror.ReasonTooManyExperiments, "parent",
				"policy %s has %d experiments, the most a policy may have; delete or commit one first", ns, ce.Cap).
				WithLimit("%d experiments", ce.Cap)
		}
		return nil, withField(s.apiError(ctx, err), "policy_experiment_id")
	}
	s.log.Info("control: created policy experiment", "experiment", e.GetName(), "etag", e.GetEtag(), "author", e.GetAuthor())
	return operation(&lehrpb.CreatePolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: e.GetName(),
	}, e)
}

// GetPolicyExperiment returns an experiment.
func (s *Service) GetPolicyExperiment(ctx context.Context, req *lehrpb.GetPolicyExperimentRequest) (_ *lehrpb.PolicyExperiment, err error) {
	defer s.track(ctx, "GetPolicyExperiment", time.Now(), &err)
	ns, id, err := parseExperimentName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	e, err := s.previews.Experiment(ctx, ns, id)
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	return e.PolicyExperiment, nil
}

// ListPolicyExperiments lists a policy's experiments by id, filtered.
func (s *Service) ListPolicyExperiments(ctx context.Context, req *lehrpb.ListPolicyExperimentsRequest) (_ *lehrpb.ListPolicyExperimentsResponse, err error) {
	defer s.track(ctx, "ListPolicyExperiments", time.Now(), &err)
	ns, err := parsePolicyName("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), defaultExperimentPage)
	if err != nil {
		return nil, err
	}
	match, err := parseExperimentFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	st, err := s.previews.Experiments(ctx, ns, names.Preview(ns))
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	out := &lehrpb.ListPolicyExperimentsResponse{}
	for _, e := range st.Experiments {
		if e.ID <= req.GetPageToken() {
			continue
		}
		if !match(e.PolicyExperiment) {
			continue
		}
		if len(out.PolicyExperiments) == size {
			out.NextPageToken = out.PolicyExperiments[size-1].GetName()[strings.LastIndex(out.PolicyExperiments[size-1].GetName(), "/")+1:]
			break
		}
		out.PolicyExperiments = append(out.PolicyExperiments, e.PolicyExperiment)
	}
	return out, nil
}

// experimentFor reads a policy's head and one of its experiments, checking
// a stated etag; field names the request field of the experiment's name.
func (s *Service) experimentFor(ctx context.Context, field, ns, id, etag string) (*lehrpb.Namespace, *store.StoredExperiment, error) {
	head, err := s.policyHead(ctx, field, ns)
	if err != nil {
		return nil, nil, err
	}
	cur, err := s.previews.Experiment(ctx, ns, id)
	if err != nil {
		return nil, nil, withField(s.apiError(ctx, err), field)
	}
	if err := checkEtag("etag", etag, cur); err != nil {
		return nil, nil, err
	}
	return head, cur, nil
}

// checkEtag refuses a stated etag that is not the experiment's.
func checkEtag(field, stated string, e *store.StoredExperiment) error {
	if stated != "" && stated != e.GetEtag() {
		return apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, field,
			"%s %s is not the experiment's current etag %q: it changed since you read it; get it again and retry", field, excerpt.Quote(stated), e.GetEtag())
	}
	return nil
}

// UpdatePolicyExperiment replaces an experiment's policy and/or
// annotations. An ACTIVE experiment becomes SUSPENDED (AIP-236).
func (s *Service) UpdatePolicyExperiment(ctx context.Context, req *lehrpb.UpdatePolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "UpdatePolicyExperiment", time.Now(), &err)
	start := s.now()
	in := req.GetPolicyExperiment()
	if in == nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "policy_experiment", "policy_experiment is required")
	}
	ns, id, err := parseExperimentName("policy_experiment.name", in.GetName())
	if err != nil {
		return nil, err
	}
	paths, maskField, err := experimentMask(req)
	if err != nil {
		return nil, err
	}
	var setPolicy, setAnnotations bool
	for i, p := range paths {
		switch p {
		case "*":
			setPolicy, setAnnotations = true, true
		case "policy", "policy.rules":
			setPolicy = true
		case "annotations":
			setAnnotations = true
		default:
			return nil, invalid(apierror.ReasonInvalidArgument, propField(maskField, i, ""),
				"cannot update %s; the fields an update may replace are policy (or policy.rules) and annotations", excerpt.Quote(p))
		}
	}
	if len(paths) == 0 {
		setPolicy, setAnnotations = true, true
	}
	if err := checkAudit(ctx, "", ""); err != nil {
		return nil, err
	}
	head, cur, err := s.experimentFor(ctx, "policy_experiment.name", ns, id, req.GetEtag())
	if err != nil {
		return nil, err
	}
	next := proto.CloneOf(cur.PolicyExperiment)
	if setPolicy {
		if _, err := s.checkExperimentPolicy(ctx, "policy_experiment.policy", head, in.GetPolicy()); err != nil {
			return nil, err
		}
		next.Policy = &lehrpb.Policy{Name: PolicyName(ns), Rules: in.GetPolicy().GetRules()}
	}
	if setAnnotations {
		if err := checkAnnotations("policy_experiment.annotations", in.GetAnnotations()); err != nil {
			return nil, err
		}
		next.Annotations = in.GetAnnotations()
	}
	now := s.now()
	next.UpdateTime = timestamppb.New(now)
	next.Author = s.attribute(ctx, "").author
	next.Etag = preview.ExperimentEtag(next)
	wasActive := next.GetPreviewMetadata().GetState() == lehrpb.PolicyPreviewMetadata_ACTIVE
	if wasActive {
		next.PreviewMetadata.State = lehrpb.PolicyPreviewMetadata_SUSPENDED
		next.PreviewMetadata.StopTime = timestamppb.New(now)
	}
	if err := s.admitContent(next); err != nil {
		return nil, err
	}
	if _, err := s.previews.PutExperiment(ctx, ns, id, next, cur.ModRevision); err != nil {
		return nil, s.experimentWriteError(ctx, err)
	}
	if wasActive {
		if err := s.syncPreview(ctx, ns); err != nil {
			return nil, err
		}
	}
	s.log.Info("control: updated policy experiment", "experiment", next.GetName(), "etag", next.GetEtag(), "suspended", wasActive)
	return operation(&lehrpb.UpdatePolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: next.GetName(),
	}, next)
}

// experimentMask returns the paths an experiment update names, at most
// "*", "policy", "policy.rules" and "annotations" each once, and the field
// they came in: update_mask's, or, from a client that predates the
// FieldMask, legacy_update_mask (field 2, update_mask's number then), read
// only when update_mask is absent. Clients that set both, for a control
// that reads only the old field, must list the same paths in both.
func experimentMask(req *lehrpb.UpdatePolicyExperimentRequest) ([]string, string, error) {
	legacy := req.GetLegacyUpdateMask()
	if n := len(legacy); n > maxExperimentMask {
		return nil, "", tooMany("legacy_update_mask", n, maxExperimentMask)
	}
	if req.GetUpdateMask() == nil {
		return legacy, "legacy_update_mask", nil
	}
	paths := req.GetUpdateMask().GetPaths()
	if n := len(paths); n > maxExperimentMask {
		return nil, "", tooMany("update_mask.paths", n, maxExperimentMask)
	}
	if len(legacy) > 0 && !slices.Equal(legacy, paths) {
		return nil, "", invalid(apierror.ReasonInvalidArgument, "legacy_update_mask",
			"legacy_update_mask lists other paths than update_mask; set update_mask alone, or both alike")
	}
	return paths, "update_mask.paths", nil
}

// experimentWriteError maps a guarded experiment write that lost a race.
func (s *Service) experimentWriteError(ctx context.Context, err error) error {
	if errors.Is(err, store.ErrConflict) {
		return apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "",
			"the experiment changed while this call ran; get it again and retry").WithCause(err)
	}
	return s.apiError(ctx, err)
}

// DeletePolicyExperiment deletes an experiment (and stops previewing it).
func (s *Service) DeletePolicyExperiment(ctx context.Context, req *lehrpb.DeletePolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "DeletePolicyExperiment", time.Now(), &err)
	start := s.now()
	ns, id, err := parseExperimentName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	cur, err := s.previews.Experiment(ctx, ns, id)
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	if err := checkEtag("etag", req.GetEtag(), cur); err != nil {
		return nil, err
	}
	if err := s.previews.DeleteExperiment(ctx, ns, id, cur.ModRevision); err != nil {
		return nil, s.experimentWriteError(ctx, err)
	}
	if cur.GetPreviewMetadata().GetState() == lehrpb.PolicyPreviewMetadata_ACTIVE {
		if err := s.syncPreview(ctx, ns); err != nil {
			return nil, err
		}
	}
	s.log.Info("control: deleted policy experiment", "experiment", cur.GetName(), "author", s.attribute(ctx, "").author)
	return operation(&lehrpb.DeletePolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: cur.GetName(),
	}, cur.PolicyExperiment)
}

// StartPreviewPolicyExperiment sets preview_metadata to ACTIVE with the
// log prefix and start_time now, and sends the experiment to the hosts.
func (s *Service) StartPreviewPolicyExperiment(ctx context.Context, req *lehrpb.StartPreviewPolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "StartPreviewPolicyExperiment", time.Now(), &err)
	start := s.now()
	e, err := s.setPreview(ctx, req.GetName(), true)
	if err != nil {
		return nil, err
	}
	return operation(&lehrpb.StartPreviewPolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: e.GetName(),
	}, e)
}

// StopPreviewPolicyExperiment sets preview_metadata to SUSPENDED with
// stop_time now, and withdraws the experiment from the hosts.
func (s *Service) StopPreviewPolicyExperiment(ctx context.Context, req *lehrpb.StopPreviewPolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "StopPreviewPolicyExperiment", time.Now(), &err)
	start := s.now()
	e, err := s.setPreview(ctx, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	return operation(&lehrpb.StopPreviewPolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: e.GetName(),
	}, e)
}

// setPreview starts (active) or stops previewing an experiment, exactly as
// AIP-236 says: start sets state ACTIVE, log_prefix and start_time (every
// time); stop sets state SUSPENDED and stop_time. Then the preview
// namespace follows.
func (s *Service) setPreview(ctx context.Context, name string, active bool) (*lehrpb.PolicyExperiment, error) {
	ns, id, err := parseExperimentName("name", name)
	if err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, "", ""); err != nil {
		return nil, err
	}
	_, cur, err := s.experimentFor(ctx, "name", ns, id, "")
	if err != nil {
		return nil, err
	}
	next := proto.CloneOf(cur.PolicyExperiment)
	md := next.GetPreviewMetadata()
	if md == nil {
		md = &lehrpb.PolicyPreviewMetadata{}
		next.PreviewMetadata = md
	}
	now := timestamppb.New(s.now())
	if active {
		md.State, md.LogPrefix, md.StartTime = lehrpb.PolicyPreviewMetadata_ACTIVE, LogPrefix, now
	} else {
		md.State, md.StopTime = lehrpb.PolicyPreviewMetadata_SUSPENDED, now
	}
	if _, err := s.previews.PutExperiment(ctx, ns, id, next, cur.ModRevision); err != nil {
		return nil, s.experimentWriteError(ctx, err)
	}
	if err := s.syncPreview(ctx, ns); err != nil {
		return nil, err
	}
	s.log.Info("control: policy preview", "experiment", next.GetName(), "etag", next.GetEtag(), "state", md.GetState().String())
	return next, nil
}

// maxPreviewSyncs bounds the rounds of syncPreview lost to concurrent
// experiment changes.
const maxPreviewSyncs = 8

// syncPreview makes the preview namespace of ns hold exactly its ACTIVE
// experiments, and the comparison of its latest version with the version
// it replaced while that is due (comparison). It reads the experiments and the preview namespace's
// latest version at one revision and commits on that version only, so of
// concurrent syncs the last to commit has read every change before it;
// one that loses retries. Every version goes to every zone at once
// (previews are never enforced; the strategist leaves preview namespaces
// alone).
func (s *Service) syncPreview(ctx context.Context, ns string) error {
	pns := names.Preview(ns)
	for range maxPreviewSyncs {
		st, err := s.previews.Experiments(ctx, ns, pns)
		if err != nil {
			return s.previewSyncError(ctx, ns, err)
		}
		active := make(map[string]*lehrpb.PolicyExperiment, len(st.Experiments))
		for _, e := range st.Experiments {
			active[e.ID] = e.PolicyExperiment
		}
		cmp, err := s.comparison(ctx, ns)
		if err != nil {
			return s.previewSyncError(ctx, ns, err)
		}
		snap, err := preview.Content(active, cmp)
		if err != nil {
			return s.previewSyncError(ctx, ns, err)
		}
		if st.PreviewLatest > 0 {
			info, err := s.previews.Version(ctx, pns, st.PreviewLatest)
			if err != nil {
				return s.previewSyncError(ctx, ns, err)
			}
			if info.GetChecksum() == snap.Checksum() {
				return nil
			}
		}
		_, err = s.previews.Commit(ctx, store.Commit{
			Namespace:      pns,
			Create:         st.PreviewLatest == 0,
			Kind:           lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
			ExpectedLatest: st.PreviewLatest,
			Content:        snap,
			Info: &lehrpb.VersionInfo{
				Author:  "control",
				Message: fmt.Sprintf("preview of %s: %d active experiments", ns, snap.Len()),
				Source:  lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT,
			},
			Goals:      store.GoalsAllZones,
			GoalReason: "preview",
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return s.previewSyncError(ctx, ns, err)
		}
		return nil
	}
	return s.previewSyncError(ctx, ns, store.ErrContention)
}

// previewSyncError says the experiment changed but the hosts were not
// told yet.
func (s *Service) previewSyncError(ctx context.Context, ns string, err error) error {
	e := s.apiError(ctx, err)
	e.Message = fmt.Sprintf("the experiment was changed, but sending %s's active experiments to the hosts failed: %s; any later start, stop, update or delete of an experiment of this policy sends them", ns, e.Message)
	return e
}

// CommitPolicyExperiment makes an experiment's rules the live policy's
// next version and deletes the experiment, atomically.
func (s *Service) CommitPolicyExperiment(ctx context.Context, req *lehrpb.CommitPolicyExperimentRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "CommitPolicyExperiment", time.Now(), &err)
	start := s.now()
	ns, id, err := parseExperimentName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetEtag() == "" {
		return nil, invalid(apierror.ReasonInvalidArgument, "etag",
			"etag is required: the etag of the experiment version you mean to commit (GetPolicyExperiment returns it), so that a version changed since you reviewed it is never committed")
	}
	if m := req.GetMaxDisagreement(); m < 0 || m > 1 {
		return nil, invalid(apierror.ReasonInvalidArgument, "max_disagreement", "max_disagreement is %g; want a share between 0 and 1 (0: no bound)", m)
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	head, cur, err := s.experimentFor(ctx, "name", ns, id, req.GetEtag())
	if err != nil {
		return nil, err
	}
	latest := head.GetLatestVersion()
	if pe := req.GetParentEtag(); pe != "" && pe != preview.LiveEtag(latest) {
		return nil, apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "parent_etag",
			"parent_etag %s is not the live policy's etag %q: the live policy changed since; review the experiment against it and retry", excerpt.Quote(pe), preview.LiveEtag(latest))
	}
	counts, err := s.previewCounts(ctx, ns, cur)
	if err != nil {
		return nil, err
	}
	if err := preview.Gate(req, cur.GetEtag(), counts); err != nil {
		return nil, err
	}
	// What the hosts counted becomes what the version's canary analysis
	// expects: the deny share to move by the previewed change and, when
	// a rollout canaries the version, the canary hosts to decide
	// otherwise than the replaced version on the share of decisions the
	// preview disagreed on (preview.ExpectedChange). The hosts measure the
	// second only against the comparison (comparison.go), which is sent
	// to them for the rollout alone.
	goals := s.goals(head, lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT)
	var expected []*lehrpb.CanaryCheck
	change, disagreement, n := preview.ExpectedChange(cur.GetEtag(), counts)
	compare := n >= canary.PolicyCheckMinDecisions && goals == store.GoalsNone
	if n >= canary.PolicyCheckMinDecisions {
		expected = append(expected, signals.CheckProto(canary.PolicyCheck(change)))
	}
	if compare {
		expected = append(expected, signals.CheckProto(canary.PolicyDisagreementCheck(disagreement)))
	}
	props, err := s.checkExperimentPolicy(ctx, "name", head, cur.GetPolicy())
	if err != nil {
		return nil, err
	}
	snap, err := content.New(props)
	if err != nil {
		return nil, fmt.Errorf("build snapshot: %w", err)
	}
	d, _, _ := strings.Cut(ns, "/")
	dom, err := s.domainOf(ctx, d, "name")
	if err != nil {
		return nil, err
	}
	msg := req.GetMessage()
	if msg == "" {
		msg = fmt.Sprintf("commit policy experiment %s (etag %s)", id, cur.GetEtag())
	}
	c := s.attribute(ctx, "")
	info, err := s.commitVersion(ctx, s.previews.Commit, store.Commit{
		Namespace:      ns,
		Limits:         s.domainLimits(dom),
		Kind:           head.GetKind(),
		ExpectedLatest: latest,
		// Without parent_etag the experiment replaces whatever is live.
		Rebase:  req.GetParentEtag() == "",
		Content: snap,
		Info: &lehrpb.VersionInfo{
			Author:            c.author,
			Message:           msg,
			Source:            lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT,
			TransportIdentity: c.transport,
		},
		Goals:          goals,
		GoalReason:     "commit experiment " + id,
		Experiment:     &store.ExperimentRef{ID: id, ModRevision: cur.ModRevision},
		ExpectedChecks: expected,
	})
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ce):
		return nil, apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "parent_etag",
			"parent_etag %s is not the live policy's etag %q: the live policy changed while committing; nothing was committed", excerpt.Quote(req.GetParentEtag()), preview.LiveEtag(ce.Current))
	case errors.Is(err, store.ErrConflict):
		return nil, s.experimentWriteError(ctx, err)
	case err != nil:
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.countPublish("experiment")
	s.log.Info("control: committed policy experiment", "experiment", cur.GetName(), "etag", cur.GetEtag(),
		"namespace", ns, "version", info.GetSeq(), "author", info.GetAuthor())
	if compare || cur.GetPreviewMetadata().GetState() == lehrpb.PolicyPreviewMetadata_ACTIVE {
		if err := s.syncPreview(ctx, ns); err != nil {
			// Committed; the hosts keep previewing the committed rules
			// until the next sync, and, without the comparison, the
			// canary hosts count no decision changed, so the analysis
			// fails the version's canary stage and rolls it back. Not an
			// error of the commit.
			s.log.Warn("control: committed, but updating the hosts' preview (the experiment withdrawn, the replaced version sent for comparison) failed", "experiment", cur.GetName(), "err", err)
		}
	}
	md := &lehrpb.CommitPolicyExperimentMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: cur.GetName(), Version: info,
	}
	if len(expected) > 0 {
		md.ExpectedDenyChange = &change
	}
	if compare {
		md.ExpectedDisagreement = &disagreement
	}
	return operation(md, &emptypb.Empty{})
}

// DeletePolicy deletes a live policy: its next version is the no-op
// policy, its experiments are deleted and it is marked deleted, in one
// transaction (AIP-236's cascade), and the hosts stop previewing them.
func (s *Service) DeletePolicy(ctx context.Context, req *lehrpb.DeletePolicyRequest) (_ *longrunningpb.Operation, err error) {
	defer s.track(ctx, "DeletePolicy", time.Now(), &err)
	start := s.now()
	ns, err := parsePolicyName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if err := checkAudit(ctx, "", req.GetMessage()); err != nil {
		return nil, err
	}
	head, err := s.policyHead(ctx, "name", ns)
	if err != nil {
		return nil, err
	}
	latest := head.GetLatestVersion()
	if e := req.GetEtag(); e != "" && e != preview.LiveEtag(latest) {
		return nil, apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "etag",
			"etag %s is not the live policy's etag %q: the live policy changed since you read it; nothing was deleted", excerpt.Quote(e), preview.LiveEtag(latest))
	}
	d, _, _ := strings.Cut(ns, "/")
	dom, err := s.domainOf(ctx, d, "name")
	if err != nil {
		return nil, err
	}
	noop, err := content.New(nil)
	if err != nil {
		return nil, fmt.Errorf("build the no-op policy: %w", err)
	}
	msg := req.GetMessage()
	if msg == "" {
		msg = "delete policy"
	}
	c := s.attribute(ctx, "")
	var deleted []string
	info, err := s.commitVersion(ctx, s.previews.Commit, store.Commit{
		Namespace:      ns,
		Limits:         s.domainLimits(dom),
		Kind:           head.GetKind(),
		ExpectedLatest: latest,
		// Without etag the deletion replaces whatever is live.
		Rebase:  req.GetEtag() == "",
		Content: noop,
		Info: &lehrpb.VersionInfo{
			Author:            c.author,
			Message:           msg,
			Source:            lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT,
			TransportIdentity: c.transport,
		},
		Goals:        s.goals(head, lehrpb.VersionSource_VERSION_SOURCE_SNAPSHOT),
		GoalReason:   "delete policy",
		DeletePolicy: true,
		Deleted:      &deleted,
	})
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ce):
		return nil, apierror.New(codes.Aborted, apierror.ReasonEtagMismatch, "etag",
			"etag %s is not the live policy's etag %q: the live policy changed while deleting; nothing was deleted", excerpt.Quote(req.GetEtag()), preview.LiveEtag(ce.Current))
	case err != nil:
		return nil, withField(s.apiError(ctx, err), "name")
	}
	s.countPublish("delete")
	expNames := make([]string, len(deleted))
	for i, id := range deleted {
		expNames[i] = ExperimentName(ns, id)
	}
	s.log.Info("control: deleted policy", "namespace", ns, "version", info.GetSeq(), "experiments", len(deleted), "author", info.GetAuthor())
	if err := s.syncPreview(ctx, ns); err != nil {
		// Deleted; the hosts keep previewing the deleted experiments until
		// the next sync. Not an error of the deletion.
		s.log.Warn("control: deleted policy, but withdrawing its experiments from the hosts failed", "namespace", ns, "err", err)
	}
	return operation(&lehrpb.DeletePolicyMetadata{
		CreateTime: timestamppb.New(start), EndTime: timestamppb.New(s.now()), Target: req.GetName(),
		Version: info, DeletedExperiments: expNames,
	}, &emptypb.Empty{})
}

// GetPolicyExperimentCounts sums the hosts' counts for an experiment, and
// answers its sampled history (control/previewhist).
func (s *Service) GetPolicyExperimentCounts(ctx context.Context, req *lehrpb.GetPolicyExperimentCountsRequest) (_ *lehrpb.PolicyExperimentCounts, err error) {
	defer s.track(ctx, "GetPolicyExperimentCounts", time.Now(), &err)
	ns, id, err := parseExperimentName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	e, err := s.previews.Experiment(ctx, ns, id)
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "name")
	}
	counts, err := s.previewCounts(ctx, ns, e)
	if err != nil {
		return nil, err
	}
	h, err := s.previews.ExperimentHistory(ctx, ns, e.ID)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	// A history of another revision is an earlier experiment's of the
	// same id, not yet deleted (store.PruneExperimentHistories).
	if e.CreateRevision != 0 && h.Record.GetExperimentRevision() == e.CreateRevision {
		counts.History = previewhist.Expand(h.Record)
	}
	return counts, nil
}

// previewCounts sums the distributors' latest reports, per zone and
// configuration pair, for experiment e of ns.
func (s *Service) previewCounts(ctx context.Context, ns string, e *store.StoredExperiment) (*lehrpb.PolicyExperimentCounts, error) {
	zones, err := s.previews.ListZones(ctx)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	// Per zone (the key's namespace) and over every zone (""): at most
	// the distributors' own bound of pairs, each, per zone.
	sums := preview.NewTally((len(zones) + 1) * fanoutPreviewBound)
	for _, z := range zones {
		sts, err := s.previews.ZoneStatus(ctx, z.GetName())
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		for _, st := range sts {
			for _, np := range st.GetPreview() {
				if np.GetNamespace() != ns {
					continue
				}
				for _, hc := range np.GetCounts() {
					if hc.GetExperiment() != e.ID {
						continue
					}
					c := hc.GetCounts()
					for _, zone := range []string{z.GetName(), ""} {
						sums.Add(preview.Key{Namespace: zone, Experiment: e.ID, LiveEtag: c.GetLiveEtag(), ExperimentEtag: c.GetExperimentEtag()}, c)
					}
				}
			}
		}
	}
	out := &lehrpb.PolicyExperimentCounts{Name: e.GetName(), Etag: e.GetEtag()}
	sums.Each(func(k preview.Key, c *lehrpb.PreviewCounts) {
		c = proto.CloneOf(c)
		c.Zone = k.Namespace
		if k.Namespace == "" {
			out.Totals = append(out.Totals, c)
		} else {
			out.Zones = append(out.Zones, c)
		}
	})
	return out, nil
}

// fanoutPreviewBound is the most configuration pairs a distributor's
// report carries (distributor/fanout.MaxPreviewReport): control sums at
// most that many per zone.
const fanoutPreviewBound = 1000
