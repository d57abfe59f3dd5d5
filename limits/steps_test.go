package limits_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// start is the fake clock's reading when a run begins; step times are
// offsets from it.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run is a Local scheduler on a fake clock, driven one step at a time by a
// test. Every change a step makes (a grant, an event) has happened by the
// time the step returns, so the tests need no sleeps and no timeouts.
type run struct {
	t     *testing.T
	clock *limits.FakeClock
	s     *limits.Local
	asks  map[string]*ask
	done  chan *ask // asks whose Acquire returned
	order []string  // names of the asks still waiting, oldest first
}

// ask is one Acquire started by the test.
type ask struct {
	name   string
	l      *limits.Lease
	err    error
	cancel context.CancelFunc
}

// newRun returns a run of a scheduler for cfg on a fake clock. The
// scheduler is closed when the test ends.
func newRun(t *testing.T, cfg limits.Config) *run {
	t.Helper()
	clock := limits.NewFakeClock(start)
	cfg.Clock = clock
	r := &run{t: t, clock: clock, s: limits.NewLocal(cfg), asks: map[string]*ask{}, done: make(chan *ask, 64)}
	t.Cleanup(func() {
		r.s.Close()
		for range r.order {
			<-r.done // woken with ErrClosed
		}
	})
	return r
}

// ask starts an Acquire named name and returns once it is granted (true)
// or waiting in the scheduler's list (false).
func (r *run) ask(name string, req limits.Request) bool {
	r.t.Helper()
	if _, dup := r.asks[name]; dup {
		r.t.Fatalf("ask %q started twice", name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &ask{name: name, cancel: cancel}
	r.asks[name] = a
	before := limits.Waiting(r.s)
	go func() {
		a.l, a.err = r.s.Acquire(ctx, req)
		r.done <- a
	}()
	for {
		select {
		case got := <-r.done:
			if got != a {
				r.t.Fatalf("ask %q returned while %q was starting", got.name, name)
			}
			if a.err != nil {
				r.t.Fatalf("ask %q: %v", name, a.err)
			}
			return true
		default:
		}
		if limits.Waiting(r.s) > before {
			r.order = append(r.order, name)
			return false
		}
		runtime.Gosched()
	}
}

// now acquires a lease for host that must be granted at once.
func (r *run) now(host string, avoid ...int) *limits.Lease {
	r.t.Helper()
	name := "now" + strconv.Itoa(len(r.asks))
	if !r.ask(name, limits.Request{Host: host, Avoid: avoid}) {
		r.t.Fatalf("an attempt for %s waited", host)
	}
	return r.asks[name].l
}

// soon acquires a lease for host, moving the clock from timer to timer
// until it is granted, and returns it with the time it took.
func (r *run) soon(host string) (*limits.Lease, time.Duration) {
	r.t.Helper()
	name := "soon" + strconv.Itoa(len(r.asks))
	t0 := r.clock.Now()
	if !r.ask(name, limits.Request{Host: host}) {
		for len(r.settle()) == 0 {
			if !r.clock.AdvanceToTimer() {
				r.t.Fatalf("an attempt for %s waits with no timer to wake it", host)
			}
		}
	}
	return r.asks[name].l, r.clock.Now().Sub(t0)
}

// settle collects the asks granted since the last step, now that the
// scheduler has decided: the waiting list is shorter by as many.
func (r *run) settle() []string {
	r.t.Helper()
	n := len(r.order) - limits.Waiting(r.s)
	var got []string
	for range n {
		select {
		case a := <-r.done:
			if a.err != nil {
				r.t.Fatalf("ask %q: %v", a.name, a.err)
			}
			got = append(got, a.name)
			r.order = slices.DeleteFunc(r.order, func(s string) bool { return s == a.name })
		case <-time.After(10 * time.Second): // a failsafe, not a wait: the grant is made already
			r.t.Fatalf("%d grants made but not returned", n)
		}
	}
	return got
}

// cancel withdraws the waiting ask name; its Acquire returns ctx's error.
func (r *run) cancel(name string) {
	r.t.Helper()
	a := r.asks[name]
	a.cancel()
	if got := <-r.done; got != a {
		r.t.Fatalf("cancelling %q returned %q", name, got.name)
	}
	r.order = slices.DeleteFunc(r.order, func(s string) bool { return s == name })
	if !errors.Is(a.err, context.Canceled) {
		r.t.Fatalf("cancelled ask %q: err %v, want context.Canceled", name, a.err)
	}
}

// events returns the health events since the last call as "proxy state"
// strings, with the cooldown for "benched".
func (r *run) events() []string {
	out := []string{}
	for _, ev := range r.s.Events(nil) {
		s := fmt.Sprintf("%d %s", ev.Proxy, ev.State)
		if ev.State == "benched" {
			s += " " + ev.Cooldown.String()
		}
		out = append(out, s)
	}
	return out
}

// step is one row of a test's script: what the test does, then what the
// scheduler must have done.
type step struct {
	at      time.Duration  // first move the clock to this long after the start (0: leave it)
	ask     []string       // start an Acquire under each name, in order ...
	host    string         // ... for this host ("h:1" if empty) ...
	avoid   []int          // ... avoiding these proxies
	cancel  []string       // withdraw these waiting asks
	finish  []string       // finish the leases of these asks ...
	outcome limits.Outcome // ... with this outcome
	drain   bool           // tell the scheduler the input has run out

	grant  []string // then: the asks granted by this step, "name" or "name@proxy"; any other waits
	events []string // and, if not nil, the health events since the last step
}

// play runs steps in order and checks each.
func (r *run) play(steps []step) {
	r.t.Helper()
	for i, st := range steps {
		if st.at > 0 {
			d := start.Add(st.at).Sub(r.clock.Now())
			if d < 0 {
				r.t.Fatalf("step %d: at %s is in the past", i, st.at)
			}
			r.clock.Advance(d)
		}
		var got []string
		for _, name := range st.ask {
			host := st.host
			if host == "" {
				host = "h:1"
			}
			if r.ask(name, limits.Request{Host: host, Avoid: st.avoid}) {
				got = append(got, name)
			}
		}
		for _, name := range st.cancel {
			r.cancel(name)
		}
		for _, name := range st.finish {
			r.asks[name].l.Finish(st.outcome)
		}
		if st.drain {
			r.s.Drain()
		}
		got = append(got, r.settle()...)
		r.checkGrants(i, got, st.grant)
		if st.events != nil {
			if evs := r.events(); !slices.Equal(evs, st.events) {
				r.t.Fatalf("step %d: events %q, want %q", i, evs, st.events)
			}
		}
	}
}

func (r *run) checkGrants(i int, got, want []string) {
	r.t.Helper()
	var names []string
	for _, w := range want {
		name, proxy, on := strings.Cut(w, "@")
		names = append(names, name)
		if !slices.Contains(got, name) {
			continue // reported below
		}
		if p, _ := strconv.Atoi(proxy); on && r.asks[name].l.Proxy != p {
			r.t.Fatalf("step %d: %s went to proxy %d, want %s", i, name, r.asks[name].l.Proxy, proxy)
		}
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		r.t.Fatalf("step %d: granted %q, want %q", i, got, names)
	}
}

// names returns prefix0 … prefix(n-1).
func names(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = prefix + strconv.Itoa(i)
	}
	return s
}
