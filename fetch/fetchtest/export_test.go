package fetchtest

// Changed returns a channel that is closed when the count of requests
// in flight at t next changes.
func (t *Target) Changed() <-chan struct{} { return t.changes.wait() }

// Changed returns a channel that is closed when p's counts of requests
// in flight next change.
func (p *Proxy) Changed() <-chan struct{} { return p.changes.wait() }
