package fanout

import "sync"

// wants counts, per namespace, the connected agents subscribing to it, so
// that the distributor holds the content of those namespaces only
// (Options.Wanted): a zone's distributor need not hold the whole catalog
// when its hosts use a part of it.
type wants struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts one more subscriber of each namespace and returns those that
// had none.
func (w *wants) add(nss []string) (first []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	for _, ns := range nss {
		w.n[ns]++
		if w.n[ns] == 1 {
			first = append(first, ns)
		}
	}
	return first
}

// remove counts one subscriber fewer of each namespace and returns those
// left with none.
func (w *wants) remove(nss []string) (last []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ns := range nss {
		switch w.n[ns] {
		case 0:
		case 1:
			delete(w.n, ns)
			last = append(last, ns)
		default:
			w.n[ns]--
		}
	}
	return last
}

func (w *wants) has(ns string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[ns] > 0
}

func (w *wants) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.n)
}

// Wanted reports whether a connected agent subscribes to ns.
func (s *Server) Wanted(ns string) bool { return s.wants.has(ns) }

// WantedNamespaces returns how many namespaces connected agents subscribe to.
func (s *Server) WantedNamespaces() int { return s.wants.len() }

// want and unwant count subscriptions starting and ending, and tell
// Options.Wanted of namespaces gaining their first subscriber or losing
// their last. Called without session locks held.
func (s *Server) want(nss []string) {
	if first := s.wants.add(nss); len(first) > 0 && s.opts.Wanted != nil {
		s.opts.Wanted(first, true)
	}
}

func (s *Server) unwant(nss []string) {
	if last := s.wants.remove(nss); len(last) > 0 && s.opts.Wanted != nil {
		s.opts.Wanted(last, false)
	}
}
