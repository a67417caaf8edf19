package consumer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// Change is what a callback receives: the view before and after, and the
// keys that differ (added, removed or modified), sorted. Old is an empty
// view (version 0) for the first content a callback sees. When versions
// arrive faster than callbacks run, intermediate versions are skipped: Old
// is the last view delivered to that callback, New the latest. New has the
// same version as Old, with another checksum, after a repair: the agent's
// copy of that version was not control's and was replaced.
type Change struct {
	Old, New *View
	Changed  []string
}

// Rollback reports whether the change is a rollback: the new version
// republishes an older version's content (New.RollbackOf names it).
func (c Change) Rollback() bool { return c.New != nil && c.New.RollbackOf() != 0 }

// Subscription follows one namespace. Its methods are safe for concurrent
// use. Close it (or the Client) to release the lease.
type Subscription struct {
	c    *Client
	ns   string
	path string // the namespace file; set before start
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	reload chan struct{} // buffered(1): "read the file again"
	// loadMu serialises load; lastRead is the stat of the last file it
	// read and verified (nil: none), which it does not read again.
	loadMu   sync.Mutex
	lastRead os.FileInfo

	mu        sync.Mutex
	leaseID   string
	ttl       time.Duration
	view      *View
	updated   chan struct{} // closed and replaced when view changes
	callbacks map[int]*callback
	nextCB    int
	reported  *View // last view reported to the agent; nil: none
	wake      chan struct{}
	closed    bool
	// unavailable is why the agent's distributor cannot serve the
	// namespace, as the agent last said; nil: nothing known.
	unavailable *UnavailableError

	// previewOnce starts preview, the shadow evaluation of a policy
	// subscription's experiments, on the first Evaluate.
	previewOnce sync.Once
	preview     *shadow
}

// goIfOpen runs fn in a goroutine Close waits for, unless the subscription
// is closed; it reports whether it did.
func (s *Subscription) goIfOpen(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(fn)
	return true
}

func newSubscription(c *Client, ns string) *Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	empty := &View{namespace: ns}
	return &Subscription{
		c:         c,
		ns:        ns,
		log:       c.log.With("namespace", ns),
		ctx:       ctx,
		cancel:    cancel,
		reload:    make(chan struct{}, 1),
		view:      empty,
		updated:   make(chan struct{}),
		callbacks: map[int]*callback{},
		wake:      make(chan struct{}, 1),
	}
}

// lease asks the agent for a lease on the namespace.
func (s *Subscription) lease(ctx context.Context) (*lehrpb.SubscribeResponse, error) {
	return s.c.api.Subscribe(ctx, &lehrpb.SubscribeRequest{
		Namespace:  s.ns,
		ClientId:   s.c.opts.ClientID,
		Service:    s.c.opts.Service,
		MetricsUrl: s.c.opts.MetricsURL,
		TtlSeconds: uint32(s.c.opts.LeaseTTL / time.Second),
	})
}

func (s *Subscription) setLease(r *lehrpb.SubscribeResponse) {
	s.mu.Lock()
	s.leaseID = r.GetLeaseId()
	s.ttl = time.Duration(r.GetTtlSeconds()) * time.Second
	if s.path == "" {
		s.path = r.GetPath()
	}
	s.mu.Unlock()
	s.setUnavailable(r.GetUnavailable())
}

// start loads the current file and starts the watcher, lease keeper and
// callback dispatcher goroutines; Close stops and waits for them.
func (s *Subscription) start() error {
	if s.path == "" {
		return fmt.Errorf("consumer: subscribe %s: agent returned no file path", s.ns)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("consumer: subscribe %s: file watcher: %w", s.ns, err)
	}
	s.load()
	s.wg.Go(func() { s.watch(w) })
	s.wg.Go(s.keepLease)
	s.wg.Go(s.dispatch)
	return nil
}

// Namespace returns the subscribed namespace.
func (s *Subscription) Namespace() string { return s.ns }

// View returns the current view. It never returns nil.
func (s *Subscription) View() *View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view
}

// callback is a registered OnChange function and the last view it saw.
type callback struct {
	fn   func(Change) error
	seen *View
}

// OnChange registers fn. It is first called with the current view if there
// is one (Old is the empty view), then for every later change, in order and
// never concurrently with other callbacks of this subscription. If fn
// returns an error, the agent is told the version was rejected (this feeds
// canary analysis); the view still moves on. The returned func unregisters.
func (s *Subscription) OnChange(fn func(Change) error) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextCB
	s.nextCB++
	s.callbacks[id] = &callback{fn: fn, seen: &View{namespace: s.ns}}
	s.signal()
	return func() {
		s.mu.Lock()
		delete(s.callbacks, id)
		s.mu.Unlock()
	}
}

// Next blocks until the view supersedes after — a newer version, or the
// same version repaired with another checksum — (pass nil or the empty view
// to get the first content) and returns it. It returns ctx's error, or
// ErrClosed once the subscription is closed.
//
//	var v *consumer.View
//	for {
//		v, err = sub.Next(ctx, v)
//		if err != nil { return err }
//		apply(v)
//	}
func (s *Subscription) Next(ctx context.Context, after *View) (*View, error) {
	for {
		s.mu.Lock()
		v, ch, closed := s.view, s.updated, s.closed
		s.mu.Unlock()
		if v.supersedes(after) {
			return v, nil
		}
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close releases the lease and stops watching. It is idempotent.
func (s *Subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.updated)
	s.updated = make(chan struct{})
	lease := s.leaseID
	s.mu.Unlock()

	s.cancel()
	s.wg.Wait()
	s.c.forget(s)
	if lease != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := s.c.api.Unsubscribe(ctx, &lehrpb.UnsubscribeRequest{LeaseId: lease}); err != nil {
			s.log.Debug("unsubscribe", "err", err)
		}
	}
	return nil
}

// load reads the file and, if it holds a newer valid version, makes it the
// current view. A missing file is normal (not arrived yet); an invalid one
// is logged and ignored, keeping the last good view. The file last read
// is not read again (see readView).
func (s *Subscription) load() {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	v, fi, err := readView(s.path, s.lastRead)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("ignoring unreadable namespace file; keeping the last good view", "path", s.path, "err", err)
		}
		return
	}
	s.lastRead = fi
	if v == nil {
		return
	}
	if v.namespace != s.ns {
		s.log.Warn("ignoring namespace file for another namespace", "path", s.path, "file_namespace", v.namespace)
		return
	}
	s.mu.Lock()
	if s.closed || !v.supersedes(s.view) {
		s.mu.Unlock()
		return
	}
	s.view = v
	close(s.updated)
	s.updated = make(chan struct{})
	s.signal()
	s.mu.Unlock()
}

// signal wakes the dispatcher. s.mu must be held or irrelevant.
func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) requestReload() {
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// watch follows the namespace file with fsnotify. It watches the file's
// directory, or while that does not exist the nearest existing ancestor, so
// files and directories that appear later (or are recreated) are noticed.
// When the watched directory itself is removed or renamed, the watcher is
// replaced: re-adding the same path to a watcher whose old watch is still
// being torn down can lose the new watch's events.
func (s *Subscription) watch(w *fsnotify.Watcher) {
	defer func() { w.Close() }()
	dir := filepath.Dir(s.path)
	watched := ""
	rewatch := func() {
		// Loop: a deeper directory created between the Stat in
		// nearestExisting and Add would raise no event on the new watch,
		// so look again after each Add until nothing changed.
		for {
			target := nearestExisting(dir)
			if target == watched {
				return
			}
			if watched != "" {
				_ = w.Remove(watched)
			}
			if err := w.Add(target); err != nil {
				s.log.Warn("cannot watch directory", "dir", target, "err", err)
				watched = ""
				return
			}
			watched = target
		}
	}
	rewatch()
	s.load()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.reload:
			rewatch()
			s.load()
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			switch {
			case ev.Name == s.path:
				// Create covers the agent's rename into place.
				if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) {
					s.load()
				}
			case ev.Name == watched && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				nw, err := fsnotify.NewWatcher()
				if err != nil {
					s.log.Error("cannot re-create file watcher; the view will not follow the file", "err", err)
					return
				}
				w.Close()
				w, watched = nw, ""
				rewatch()
				s.load()
			case isAncestorOrSelf(ev.Name, dir):
				// A directory on the way to ours came or went.
				rewatch()
				s.load()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// Overflow: events were lost; re-read to catch up.
			s.log.Warn("file watch error; re-reading", "err", err)
			s.load()
		}
	}
}

// keepLease renews the lease at a third of its TTL and takes a new one when
// the agent forgot it (restarted). While the agent is unreachable it retries
// every RetryInterval; the view stays as it is. While no content has
// arrived it renews every RetryInterval too, so that what the agent says
// stands in the way (Unavailable) is known at once.
func (s *Subscription) keepLease() {
	retry := s.c.opts.RetryInterval
	for {
		s.mu.Lock()
		lease, ttl, empty := s.leaseID, s.ttl, s.view.version == 0
		s.mu.Unlock()
		wait := retry
		if lease != "" && ttl > 0 {
			wait = ttl / 3
			if empty {
				wait = min(wait, retry)
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		var err error
		if lease != "" {
			var r *lehrpb.KeepAliveResponse
			if r, err = s.c.api.KeepAlive(ctx, &lehrpb.KeepAliveRequest{LeaseId: lease}); err == nil {
				s.setUnavailable(r.GetUnavailable())
			}
		}
		if lease == "" || status.Code(err) == codes.NotFound {
			var r *lehrpb.SubscribeResponse
			r, err = s.lease(ctx)
			if err == nil {
				s.setLease(r)
				s.log.Info("lease (re)acquired", "lease", r.GetLeaseId())
				s.requestReload() // the agent may have rewritten the file meanwhile
			}
		}
		cancel()
		if err != nil && s.ctx.Err() == nil {
			s.log.Debug("agent unreachable; keeping the last good view", "err", err)
			s.mu.Lock()
			s.ttl = 0 // retry at RetryInterval
			s.mu.Unlock()
		}
	}
}

// dispatch runs callbacks outside any lock: each callback that has not seen
// the current view gets one Change from what it last saw. Then the outcome
// of a version is reported to the agent, once per version.
func (s *Subscription) dispatch() {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		cur, lease := s.view, s.leaseID
		type job struct {
			cb  *callback
			old *View
		}
		var jobs []job
		for id := 0; id < s.nextCB; id++ {
			if cb, ok := s.callbacks[id]; ok && cur.supersedes(cb.seen) {
				jobs = append(jobs, job{cb, cb.seen})
				cb.seen = cur
			}
		}
		report := cur.supersedes(s.reported)
		if report {
			s.reported = cur
		}
		s.mu.Unlock()

		var out outcome
		for _, j := range jobs {
			ch := Change{Old: j.old, New: cur}
			for _, c := range content.Changes(j.old.snap, cur.snap) {
				ch.Changed = append(ch.Changed, c.Key)
			}
			start := time.Now()
			panicked, err := callSafely(j.cb.fn, ch)
			out.seconds += time.Since(start).Seconds()
			out.panicked = out.panicked || panicked
			if err != nil && out.err == nil {
				out.err = err
			}
		}
		if out.err != nil {
			s.log.Warn("callback rejected version", "version", cur.version, "err", out.err)
		}
		if report && cur.version > 0 {
			s.report(lease, cur.version, out)
		}
	}
}

// outcome is how a version went with this subscription's callbacks.
type outcome struct {
	err      error   // the first callback error
	panicked bool    // a callback panicked
	seconds  float64 // time spent in callbacks
}

func (s *Subscription) report(lease string, version uint64, out outcome) {
	if lease == "" {
		return
	}
	req := &lehrpb.ReportApplyRequest{LeaseId: lease, Namespace: s.ns, Version: version, Ok: out.err == nil,
		CallbackSeconds: out.seconds, Panicked: out.panicked}
	if out.err != nil {
		req.Error = out.err.Error()
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	if _, err := s.c.api.ReportApply(ctx, req); err != nil {
		s.log.Debug("report apply", "err", err)
	}
}

// callSafely runs a callback, turning a panic into an error so one bad
// callback cannot kill the dispatcher.
func callSafely(fn func(Change) error, ch Change) (panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, err = true, fmt.Errorf("consumer: callback panicked: %v", r)
		}
	}()
	return false, fn(ch)
}

// nearestExisting returns dir or its nearest existing ancestor.
func nearestExisting(dir string) string {
	for {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// isAncestorOrSelf reports whether p is dir or one of its ancestors.
func isAncestorOrSelf(p, dir string) bool {
	for {
		if p == dir {
			return true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}
