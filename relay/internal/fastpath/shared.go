package fastpath

import "sync"

// shared is a process-wide registry of things the Subscribers of one
// database share (a LISTEN connection, the claim connections): the first
// to ask opens one, the others take the same, and the last to let go
// closes it.
type shared[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*sharedEntry[V]
}

type sharedEntry[V any] struct {
	v    V
	refs int
}

// take returns k's value, opened by open when nobody holds it, and the
// function that lets go of it (once, however often it is called): the last
// to let go closes it with close, outside the registry's lock.
func (s *shared[K, V]) take(k K, open func() V, close func(V)) (V, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]*sharedEntry[V]{}
	}
	e := s.m[k]
	if e == nil {
		e = &sharedEntry[V]{v: open()}
		s.m[k] = e
	}
	e.refs++
	var once sync.Once
	return e.v, func() {
		once.Do(func() {
			s.mu.Lock()
			e.refs--
			last := e.refs == 0
			if last {
				delete(s.m, k)
			}
			s.mu.Unlock()
			if last {
				close(e.v)
			}
		})
	}
}
