package service

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// auditedMethods are the mutating methods of the control API: each call
// is recorded in the audit log as it ends, refused or not. Distributors'
// ReportZoneStatus (a heartbeat) and reads are not.
var auditedMethods = map[string]bool{
	"CreateDomain": true, "UpdateDomain": true, "CreateNamespace": true, "CreateZone": true, "DeleteZone": true,
	"Publish": true, "Patch": true, "Rollback": true, "CompactNamespace": true,
	"SetRolloutPolicy": true, "DeleteRolloutPolicy": true, "UpdateRollout": true,
	"Evaluate": true, "ForgetCanaryHistory": true,
	"CreatePolicyExperiment": true, "UpdatePolicyExperiment": true, "DeletePolicyExperiment": true,
	"StartPreviewPolicyExperiment": true, "StopPreviewPolicyExperiment": true, "CommitPolicyExperiment": true,
	"DeletePolicy":    true,
	"DeleteNamespace": true, "DeleteDomain": true,
}

// AuditInterceptor records every call to a mutating method in the audit
// log (store.AppendAudit) once the handler returns: who, what, the target
// and its domain, the version created, the request's message and the
// result. A record that cannot be written is logged; the call's own
// result is returned either way.
func (s *Service) AuditInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	if !auditedMethods[method] {
		return handler(ctx, req)
	}
	note := new(auditNote)
	resp, err := handler(context.WithValue(ctx, auditNoteKey{}, note), req)
	rec := &lehrpb.AuditRecord{Time: timestamppb.New(s.now()), Method: method, Code: "OK", Detail: note.get()}
	if m, ok := req.(proto.Message); ok {
		rec.Target, rec.Message = auditTarget(m.ProtoReflect())
		c := s.attribute(ctx, stringField(m.ProtoReflect(), "author"))
		rec.Author, rec.TransportIdentity = c.author, c.transport
	}
	rec.Domain = domainOfTarget(rec.GetTarget(), method)
	if m, ok := resp.(proto.Message); ok && err == nil {
		rec.Version = versionOf(m.ProtoReflect())
	}
	var fold *foldKey
	if err != nil {
		e := apierror.FromError(err)
		rec.Code, rec.Error = codeName(e.Code.String()), e.Message
		if e.Reason != "" {
			rec.Error = e.Reason + ": " + e.Message
		}
		fold = &foldKey{method: method, domain: rec.GetDomain(), author: rec.GetAuthor(), transport: rec.GetTransportIdentity(), code: rec.GetCode(), reason: e.Reason}
	}
	boundAudit(rec)
	if fold != nil && s.audit.fold(*fold, rec) {
		return resp, err // counted in a record to come
	}
	s.audit.add(s, rec)
	return resp, err
}

// auditNote is what a handler says of its call for the audit record
// (AuditRecord.detail), handed to it by AuditInterceptor in its context.
type auditNote struct {
	mu     sync.Mutex
	detail string
}

type auditNoteKey struct{}

func (n *auditNote) get() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.detail
}

// noteAudit sets the detail of the audit record of the call of ctx; it
// does nothing for a call the audit log does not record.
func noteAudit(ctx context.Context, format string, args ...any) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.mu.Lock()
		n.detail = fmt.Sprintf(format, args...)
		n.mu.Unlock()
	}
}

// Audit records what control does by itself — the rollout strategist's
// goal moves and rollbacks — in the audit log beside the calls of users:
// every automated action goes through the same front door. rec's time is
// set if it has none.
func (s *Service) Audit(rec *lehrpb.AuditRecord) {
	if rec.GetTime() == nil {
		rec.Time = timestamppb.New(s.now())
	}
	if rec.GetCode() == "" {
		rec.Code = "OK"
	}
	boundAudit(rec)
	s.audit.add(s, rec)
}

// auditFoldWindow is how long refused calls alike are counted into one
// record after one was recorded (AuditRecord.repeats).
const auditFoldWindow = time.Second

// foldKey is what makes refused calls alike.
type foldKey struct{ method, domain, author, transport, code, reason string }

// folded counts the refused calls alike since the last one recorded.
type folded struct {
	until time.Time           // the window ends
	last  *lehrpb.AuditRecord // the latest refused call, recorded with the count
	n     int32               // calls counted since the window began
}

// fold reports whether rec, a refused call, is counted into the window of
// an earlier one alike (true) or must be recorded now (false), which then
// opens a window: a flood of refused calls costs the log one record a
// second for each caller and cause, each saying how many it stands for.
func (a *auditWriter) fold(k foldKey, rec *lehrpb.AuditRecord) bool {
	now := rec.GetTime().AsTime()
	a.mu.Lock()
	defer a.mu.Unlock()
	if f := a.folds[k]; f != nil {
		if now.Before(f.until) {
			f.last, f.n = rec, f.n+1
			return true
		}
		a.expireLocked(k, f)
	}
	if a.folds == nil {
		a.folds = map[foldKey]*folded{}
	}
	a.folds[k] = &folded{until: now.Add(auditFoldWindow)}
	return false
}

// expireFolds queues the record of every window that ended by now (every
// window, for the zero time: Close), and reports whether it queued any.
func (a *auditWriter) expireFolds(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	queued := false
	for k, f := range a.folds {
		if now.IsZero() || !now.Before(f.until) {
			queued = a.expireLocked(k, f) || queued
		}
	}
	return queued
}

// expireLocked ends k's window, queueing its record if it counted calls.
func (a *auditWriter) expireLocked(k foldKey, f *folded) bool {
	delete(a.folds, k)
	if f.n == 0 {
		return false
	}
	f.last.Repeats = f.n - 1
	a.queue = append(a.queue, f.last)
	return true
}

// maxAuditField bounds each text field of an audit record: what a
// refused call sent is quoted, not kept. A valid message
// (validate.MaxMessageBytes) and author fit whole; a record stays under
// 7 KiB, so a batch of maxOpsPerTxn records fits one etcd request however
// large the calls were, and one caller's junk cannot fail the batch that
// holds other callers' records.
const maxAuditField = 1 << 10

// boundAudit cuts every text field of rec that a caller could fill to
// maxAuditField bytes of valid UTF-8 (excerpt.Truncate; a field cut says
// how long it was).
func boundAudit(rec *lehrpb.AuditRecord) {
	for _, f := range []*string{&rec.Author, &rec.TransportIdentity, &rec.Target, &rec.Domain, &rec.Message, &rec.Error, &rec.Detail} {
		*f = excerpt.Truncate(strings.ToValidUTF8(*f, "\uFFFD"), maxAuditField)
	}
}

// Bounds of the audit writer.
const (
	// maxAuditQueue is how many records may wait for the writer; a call
	// that finds it full writes its record itself (backpressure, no loss).
	maxAuditQueue = 10_000
	// auditWriteTimeout bounds one batch's write.
	auditWriteTimeout = 10 * time.Second
	// auditLinger is how long the writer gathers records after the first
	// of a batch: a burst of calls costs one etcd commit for its records,
	// and a producer publishing back to back does not find the audit
	// write of its previous publish syncing etcd's log in front of its
	// next commit (bench/results/HISTORY.md, "Publish: fewer etcd requests"). A reader of the
	// log (ListAuditRecords) and Close do not wait for it.
	auditLinger = 20 * time.Millisecond
)

// auditWriter writes audit records in the background, in batches of one
// etcd transaction each, so that a mutating call does not wait for one
// more etcd commit. Its goroutine starts with the first record and ends
// with Service.Close, which writes what is queued first. A record queued
// when the process dies is lost (the version records keep author and
// message of every version either way).
type auditWriter struct {
	wg      sync.WaitGroup // the writer goroutine
	mu      sync.Mutex
	started bool // the writer runs (or ran)
	closed  bool // close was called: nothing starts any more
	queue   []*lehrpb.AuditRecord
	folds   map[foldKey]*folded // refused calls being counted (fold)
	waiters []chan struct{}     // closed once everything queued before them is written
	wake    chan struct{}       // buffered(1): a record was queued
	flush   chan struct{}       // buffered(1): a waiter or close wants the queue written now
}

// add queues rec, starting the writer on first use.
func (a *auditWriter) add(s *Service, rec *lehrpb.AuditRecord) {
	if !a.start(s) {
		s.writeAudit([]*lehrpb.AuditRecord{rec}) // a call still running after Close
		return
	}
	a.mu.Lock()
	if a.closed || len(a.queue) >= maxAuditQueue {
		a.mu.Unlock()
		// Closed meanwhile, or backpressure: the caller writes its own.
		s.writeAudit([]*lehrpb.AuditRecord{rec})
		return
	}
	a.queue = append(a.queue, rec)
	a.mu.Unlock()
	a.signal()
}

// start starts the writer if it is not running; false once close was
// called.
func (a *auditWriter) start(s *Service) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	if !a.started {
		a.started, a.wake, a.flush = true, make(chan struct{}, 1), make(chan struct{}, 1)
		a.wg.Go(func() { a.run(s) })
	}
	return true
}

func (a *auditWriter) signal() { notify(a.wake) }

// notify wakes the writer through ch without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sync waits until every record queued before it is written (or ctx ends).
func (a *auditWriter) sync(ctx context.Context, s *Service) error {
	if !a.start(s) {
		return nil // closed: later records are written by their callers
	}
	ch := make(chan struct{})
	a.mu.Lock()
	a.waiters = append(a.waiters, ch)
	a.mu.Unlock()
	notify(a.flush)
	a.signal()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run writes batches until close, then writes what is left. A batch is
// what was queued auditLinger after its first record, or when a waiter or
// close asked for it.
func (a *auditWriter) run(s *Service) {
	linger := time.NewTimer(auditLinger)
	linger.Stop()
	folds := time.NewTicker(auditFoldWindow)
	defer folds.Stop()
	for {
		select {
		case <-a.wake:
			linger.Reset(auditLinger)
			select {
			case <-linger.C:
			case <-a.flush:
				linger.Stop()
			}
		case now := <-folds.C:
			if !a.expireFolds(now) {
				continue
			}
		}
		a.mu.Lock()
		batch, waiters, closed := a.queue, a.waiters, a.closed
		a.queue, a.waiters = nil, nil
		a.mu.Unlock()
		if len(batch) > 0 {
			s.writeAudit(batch)
		}
		for _, w := range waiters {
			close(w)
		}
		if closed {
			// Nothing is queued after closed is set (add writes its own
			// record then), so the queue is empty for good.
			return
		}
	}
}

// writeAudit stores records, logging and counting a failure.
func (s *Service) writeAudit(recs []*lehrpb.AuditRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
	defer cancel()
	if err := s.st.AppendAudit(ctx, recs...); err != nil {
		s.metrics.GetOrCreateCounter(`lehr_control_audit_errors_total`).Add(len(recs))
		s.log.Error("control: audit records not written", "records", len(recs), "first_method", recs[0].GetMethod(), "err", err)
	}
}

// close waits for the writer to write what is queued; each batch's write
// is bounded by auditWriteTimeout.
func (a *auditWriter) close() {
	a.expireFolds(time.Time{})
	a.mu.Lock()
	a.closed = true
	started := a.started
	a.mu.Unlock()
	if started {
		notify(a.flush)
		a.signal()
	}
	a.wg.Wait()
}

// auditTarget finds what a request acts on, and its message: the first of
// the fields namespace, name, scope, parent, zone, or the name of an
// embedded domain, namespace or policy_experiment.
func auditTarget(m protoreflect.Message) (target, message string) {
	message = stringField(m, "message")
	for _, f := range []string{"namespace", "name", "scope", "parent", "zone"} {
		if v := stringField(m, f); v != "" {
			return v, message
		}
	}
	for _, f := range []string{"domain", "namespace", "policy_experiment"} {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(f))
		if fd != nil && fd.Message() != nil && m.Has(fd) {
			if v := stringField(m.Get(fd).Message(), "name"); v != "" {
				return v, message
			}
		}
	}
	return "", message
}

// stringField returns m's string field name, "" when there is none.
func stringField(m protoreflect.Message, name string) string {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return m.Get(fd).String()
}

// versionOf returns the seq of a response's version field, if it has one.
func versionOf(m protoreflect.Message) uint64 {
	fd := m.Descriptor().Fields().ByName("version")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "lehr.v1.VersionInfo" || !m.Has(fd) {
		return 0
	}
	return m.Get(fd).Message().Interface().(*lehrpb.VersionInfo).GetSeq()
}

// domainOfTarget returns the domain a target belongs to: the first part
// of a namespace, the domain of a resource name "domains/{d}/…", a domain
// itself, or "" (zones).
func domainOfTarget(target, method string) string {
	switch {
	case method == "CreateZone" || method == "DeleteZone" || target == "":
		return ""
	case strings.HasPrefix(target, names.PolicyResourcePrefix):
		d, _, _ := strings.Cut(strings.TrimPrefix(target, names.PolicyResourcePrefix), "/")
		return d
	}
	d, _, _ := strings.Cut(target, "/")
	d, _, _ = strings.Cut(d, "@") // evaluation ids "ns@v/name"
	return d
}

// ListAuditRecords returns audit records, oldest first. See the proto.
func (s *Service) ListAuditRecords(ctx context.Context, req *lehrpb.ListAuditRecordsRequest) (_ *lehrpb.ListAuditRecordsResponse, err error) {
	defer s.track(ctx, "ListAuditRecords", time.Now(), &err)
	if d := req.GetDomain(); d != "" {
		if err := names.Domain(d); err != nil {
			return nil, nameError("domain", err)
		}
	}
	size, err := pageSize(req.GetPageSize(), defaultExperimentPage)
	if err != nil {
		return nil, err
	}
	// This replica's own records first, so a caller reads its writes.
	if err := s.audit.sync(ctx, s); err != nil {
		return nil, s.apiError(ctx, err)
	}
	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	recs, next, err := s.st.AuditRecords(ctx, req.GetDomain(), since, req.GetPageToken(), size)
	if err != nil {
		return nil, s.apiError(ctx, err)
	}
	return &lehrpb.ListAuditRecordsResponse{Records: recs, NextPageToken: next}, nil
}

// codeName turns a gRPC code's Go name ("FailedPrecondition") into its
// canonical name ("FAILED_PRECONDITION").
func codeName(goName string) string {
	var b strings.Builder
	for i, r := range goName {
		if i > 0 && r >= 'A' && r <= 'Z' && goName != "OK" {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
