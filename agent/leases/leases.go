// Package leases is the agent's table of consumer leases on namespaces.
//
// A consumer takes a lease on a namespace (Subscribe), renews it before its
// TTL runs out (KeepAlive) and releases it when done (Unsubscribe). A
// namespace is wanted while it has a live lease and for a grace period after
// its last lease ends, so a consumer that restarts, or that briefly loses
// its keepalives, does not cost an upstream unsubscribe and a full resend.
//
// The table holds no timers and starts no goroutines: time comes from an
// injected clock (Options.Now) and the owner calls Expire periodically.
// Every mutating method returns the namespace transitions it caused (wanted → unwanted or
// the reverse), so the caller acts on them after the table's lock is
// released; the table never calls out.
//
// Imported by agent and agent/localapi (which holds leases for its callers).
package leases

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults for zero Options fields.
const (
	DefaultTTL    = 30 * time.Second
	DefaultMaxTTL = 10 * time.Minute
	DefaultGrace  = 5 * time.Minute
	// MinTTL is the shortest TTL granted; shorter requests are raised to it.
	MinTTL = time.Second
)

// ErrNotFound is returned for a lease id that does not exist or has expired.
var ErrNotFound = errors.New("leases: lease not found or expired")

// Options configure a Table. The zero value is usable.
type Options struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// DefaultTTL is granted when a subscriber asks for 0; zero means
	// DefaultTTL (30 s).
	DefaultTTL time.Duration
	// MaxTTL caps requested TTLs; zero means DefaultMaxTTL (10 min).
	MaxTTL time.Duration
	// Grace is how long a namespace stays wanted after its last lease ends;
	// zero means DefaultGrace (5 min). Negative means no grace at all.
	Grace time.Duration
	// MaxLeasesPerClient bounds the live leases of one client id; zero
	// means DefaultMaxLeasesPerClient (1,000).
	MaxLeasesPerClient int
	// MaxLeases bounds the live leases of all clients; zero means
	// DefaultMaxLeases (10,000).
	MaxLeases int
}

// Default lease caps.
const (
	DefaultMaxLeasesPerClient = 1_000
	DefaultMaxLeases          = 10_000
)

// TooManyError is Subscribe's refusal beyond a cap: Client's own
// (MaxLeasesPerClient) or, with Client empty, every client's (MaxLeases).
type TooManyError struct {
	Client string
	Limit  int
}

func (e *TooManyError) Error() string {
	if e.Client != "" {
		return fmt.Sprintf("leases: client %q holds %d leases already, the most one client may; release some (Unsubscribe) or share one subscription per namespace", e.Client, e.Limit)
	}
	return fmt.Sprintf("leases: the agent holds %d leases already, the most it grants", e.Limit)
}

// Lease is one consumer's hold on a namespace.
type Lease struct {
	ID        string
	Namespace string
	ClientID  string
	// Service is the consumer's service ("" if it named none).
	Service string
	TTL     time.Duration
	// Expires is when the lease lapses unless kept alive.
	Expires time.Time
}

// Transition says a namespace became wanted (a first lease, or a hold) or
// unwanted (its grace ran out with no lease).
type Transition struct {
	Namespace string
	Wanted    bool
}

// Namespace is the state of one wanted namespace.
type Namespace struct {
	Name string
	// Leases is the number of live leases.
	Leases int
	// Services counts the live leases per service, unnamed ones left out.
	Services map[string]int
	// Until is when the grace period ends; zero while Leases > 0.
	Until time.Time
}

type nsState struct {
	leases map[string]*Lease
	until  time.Time // grace end, when len(leases) == 0
}

// Table is the lease table. It is safe for concurrent use.
type Table struct {
	now                   func() time.Time
	defTTL, maxTTL, grace time.Duration
	maxPerClient, maxAll  int

	mu       sync.Mutex
	leases   map[string]*Lease   // by id
	ns       map[string]*nsState // wanted namespaces only
	byClient map[string]int      // live leases per client id
}

// New returns an empty table.
func New(opts Options) *Table {
	t := &Table{
		now:          opts.Now,
		defTTL:       opts.DefaultTTL,
		maxTTL:       opts.MaxTTL,
		grace:        opts.Grace,
		leases:       map[string]*Lease{},
		ns:           map[string]*nsState{},
		byClient:     map[string]int{},
		maxPerClient: opts.MaxLeasesPerClient,
		maxAll:       opts.MaxLeases,
	}
	if t.maxPerClient <= 0 {
		t.maxPerClient = DefaultMaxLeasesPerClient
	}
	if t.maxAll <= 0 {
		t.maxAll = DefaultMaxLeases
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.defTTL <= 0 {
		t.defTTL = DefaultTTL
	}
	if t.maxTTL <= 0 {
		t.maxTTL = DefaultMaxTTL
	}
	if t.defTTL > t.maxTTL {
		t.defTTL = t.maxTTL
	}
	switch {
	case t.grace == 0:
		t.grace = DefaultGrace
	case t.grace < 0:
		t.grace = 0
	}
	return t
}

// GrantTTL returns the TTL granted for a request of ttl: the default for 0,
// otherwise ttl clamped to [MinTTL, MaxTTL].
func (t *Table) GrantTTL(ttl time.Duration) time.Duration {
	switch {
	case ttl <= 0:
		return t.defTTL
	case ttl < MinTTL:
		return MinTTL
	case ttl > t.maxTTL:
		return t.maxTTL
	}
	return ttl
}

// Grace returns the grace period in effect.
func (t *Table) Grace() time.Duration { return t.grace }

// Subscribe grants a new lease on ns to clientID of service ("" for none).
// ttl 0 means the default; see GrantTTL. The namespace name and the
// service are not validated here. Beyond
// MaxLeasesPerClient or MaxLeases it grants nothing and returns a
// *TooManyError.
func (t *Table) Subscribe(ns, clientID, service string, ttl time.Duration) (Lease, []Transition, error) {
	l := &Lease{ID: newID(), Namespace: ns, ClientID: clientID, Service: service, TTL: t.GrantTTL(ttl)}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.byClient[clientID] >= t.maxPerClient:
		return Lease{}, nil, &TooManyError{Client: clientID, Limit: t.maxPerClient}
	case len(t.leases) >= t.maxAll:
		return Lease{}, nil, &TooManyError{Limit: t.maxAll}
	}
	t.byClient[clientID]++
	now := t.now()
	l.Expires = now.Add(l.TTL)
	t.leases[l.ID] = l
	st, ok := t.ns[ns]
	var tr []Transition
	if !ok {
		st = &nsState{leases: map[string]*Lease{}}
		t.ns[ns] = st
		tr = []Transition{{Namespace: ns, Wanted: true}}
	}
	st.leases[l.ID] = l
	st.until = time.Time{}
	return *l, tr, nil
}

// KeepAlive renews lease id for another TTL. It returns ErrNotFound if the
// lease has expired, even if Expire has not yet run.
func (t *Table) KeepAlive(id string) (Lease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[id]
	now := t.now()
	if !ok || !now.Before(l.Expires) {
		return Lease{}, fmt.Errorf("keep alive %q: %w", id, ErrNotFound)
	}
	l.Expires = now.Add(l.TTL)
	return *l, nil
}

// Lookup returns lease id if it is live.
func (t *Table) Lookup(id string) (Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[id]
	if !ok || !t.now().Before(l.Expires) {
		return Lease{}, false
	}
	return *l, true
}

// Unsubscribe ends lease id at once. The namespace stays wanted for the
// grace period; with no grace it becomes unwanted now.
func (t *Table) Unsubscribe(id string) ([]Transition, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[id]
	if !ok {
		return nil, fmt.Errorf("unsubscribe %q: %w", id, ErrNotFound)
	}
	now := t.now()
	t.removeLocked(l, now)
	return t.sweepLocked(now), nil
}

// Hold makes ns wanted for one grace period without a lease, unless it is
// wanted already. The agent holds the namespaces whose files survive a
// restart, so consumers that re-subscribe within the grace period see no gap.
func (t *Table) Hold(ns string) []Transition {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.ns[ns]; ok {
		return nil
	}
	if t.grace == 0 {
		return nil
	}
	t.ns[ns] = &nsState{leases: map[string]*Lease{}, until: t.now().Add(t.grace)}
	return []Transition{{Namespace: ns, Wanted: true}}
}

// Expire ends every lease past its TTL and returns the namespaces whose
// grace period has run out, and the namespace of every lease it ended (a
// namespace once per lease): a lease that lapses instead of being released
// is a consumer that crashed or hung.
func (t *Table) Expire() (trs []Transition, lapsed []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, l := range t.leases {
		if !now.Before(l.Expires) {
			t.removeLocked(l, now)
			lapsed = append(lapsed, l.Namespace)
		}
	}
	slices.Sort(lapsed)
	return t.sweepLocked(now), lapsed
}

// removeLocked drops l; if it was its namespace's last lease the grace
// period starts at the moment the lease ended.
func (t *Table) removeLocked(l *Lease, now time.Time) {
	delete(t.leases, l.ID)
	if t.byClient[l.ClientID]--; t.byClient[l.ClientID] <= 0 {
		delete(t.byClient, l.ClientID)
	}
	st := t.ns[l.Namespace]
	if st == nil {
		return
	}
	delete(st.leases, l.ID)
	if len(st.leases) == 0 {
		end := now
		if l.Expires.Before(now) {
			end = l.Expires
		}
		st.until = end.Add(t.grace)
	}
}

func (t *Table) sweepLocked(now time.Time) []Transition {
	var tr []Transition
	for name, st := range t.ns {
		if len(st.leases) == 0 && !now.Before(st.until) {
			delete(t.ns, name)
			tr = append(tr, Transition{Namespace: name, Wanted: false})
		}
	}
	slices.SortFunc(tr, func(a, b Transition) int { return strings.Compare(a.Namespace, b.Namespace) })
	return tr
}

// Wanted reports whether ns is wanted: it has a lease or is in grace.
func (t *Table) Wanted(ns string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.ns[ns]
	return ok
}

// Namespaces returns every wanted namespace, sorted by name.
func (t *Table) Namespaces() []Namespace {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Namespace, 0, len(t.ns))
	for name, st := range t.ns {
		n := Namespace{Name: name, Leases: len(st.leases), Until: st.until}
		for _, l := range st.leases {
			if l.Service != "" {
				if n.Services == nil {
					n.Services = map[string]int{}
				}
				n.Services[l.Service]++
			}
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Len returns the number of leases in the table, including any past their
// TTL that Expire has not yet removed.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.leases)
}

func newID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return "l-" + hex.EncodeToString(b[:])
}
