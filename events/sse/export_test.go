package sse

// Held reports what a subscription holds for its stream, without taking it.
func (s *Subscription) Held() (rows int, mustRead bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows), s.mustRead
}
