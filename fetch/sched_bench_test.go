package fetch_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"golang.org/x/sync/semaphore"
)

// naive is the scheduler fetch's is measured against: assign proxies round
// robin, then wait on that proxy's semaphore.
type naive struct {
	next atomic.Int64
	sems []*semaphore.Weighted
}

func newNaive(n, capacity int) *naive {
	s := &naive{}
	for range n {
		s.sems = append(s.sems, semaphore.NewWeighted(int64(capacity)))
	}
	return s
}

func (s *naive) Acquire(ctx context.Context, _ limits.Request) (*limits.Lease, error) {
	p := int(s.next.Add(1)-1) % len(s.sems)
	if err := s.sems[p].Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return limits.NewLease(p, p, func(limits.Outcome) { s.sems[p].Release(1) }), nil
}

func (s *naive) Drain()                                               {}
func (s *naive) Events(dst []limits.HealthEvent) []limits.HealthEvent { return dst }
func (s *naive) Close() error                                         { return nil }

// BenchmarkScheduler measures the makespan of N URLs through three proxies
// with latencies 20, 100 and 400ms and concurrency 4 each, against the ideal
// N / Σ(concurrency/latency), for this engine's scheduler and the naive one,
// with healthy proxies and with the 20ms proxy failing half its requests.
// Each op is one whole run; the figures are reported as metrics.
func BenchmarkScheduler(b *testing.B) {
	const n, capacity = 500, 4
	latencies := []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond}
	ideal := 0.0
	for _, l := range latencies {
		ideal += capacity / l.Seconds()
	}
	idealSecs := n / ideal
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	for _, sick := range []bool{false, true} {
		var ps []proxies.Proxy
		for i, l := range latencies {
			opts := fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(40 + i), Latency: l}
			if sick && i == 0 {
				opts.FailEvery = 2
			}
			px, err := fetchtest.StartHTTPProxy(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer px.Close()
			u, _ := proxies.ParseURL(px.URL)
			ps = append(ps, proxies.Proxy{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: proxies.Identity(u), Concurrency: capacity})
		}
		for _, sched := range []string{"fetch", "naive"} {
			name := fmt.Sprintf("%s/healthy", sched)
			if sick {
				name = fmt.Sprintf("%s/one-fails-half", sched)
			}
			b.Run(name, func(b *testing.B) {
				var total time.Duration
				var failed int
				var realIdeal float64
				for range b.N {
					cfg := fetch.DefaultConfig()
					cfg.Proxies = ps
					cfg.RetryBackoff = time.Millisecond
					cfg.Retries = 5
					if sched == "naive" {
						cfg.Scheduler = newNaive(len(ps), capacity)
					}
					e, err := fetch.New(cfg)
					if err != nil {
						b.Fatal(err)
					}
					var sb strings.Builder
					for i := range n {
						fmt.Fprintf(&sb, "%s/s/%d?size=256\n", tg.URL, i)
					}
					lw := &latencyWriter{sum: map[string]float64{}, n: map[string]int{}}
					start := time.Now()
					rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(sb.String())}}, lw)
					if err != nil {
						b.Fatal(err)
					}
					total += time.Since(start)
					failed += rep.Failed
					// The ideal again, from the latencies the attempts really
					// had (proxy sleep plus loopback and HTTP overhead): the
					// gap to this one is the scheduler's alone.
					measured := 0.0
					for id, sum := range lw.sum {
						measured += capacity / (sum / float64(lw.n[id]) / 1000)
					}
					realIdeal += n / measured
				}
				mk := total.Seconds() / float64(b.N)
				b.ReportMetric(mk, "makespan_s")
				b.ReportMetric(idealSecs, "ideal_s")
				b.ReportMetric(mk/idealSecs, "x_ideal")
				b.ReportMetric(float64(failed)/float64(b.N), "failed/run")
				if !sick { // failed attempts are not in the measured latencies
					b.ReportMetric(mk/(realIdeal/float64(b.N)), "x_measured_ideal")
				}
			})
		}
	}
}

// latencyWriter sums, per proxy, the time ok records spent past the queue.
type latencyWriter struct {
	sum map[string]float64
	n   map[string]int
}

func (w *latencyWriter) Write(r *results.Record) error {
	if r.OK {
		queue, _ := r.Phases.Get("queue")
		w.sum[r.Proxy] += r.ElapsedMS - queue
		w.n[r.Proxy]++
	}
	return nil
}
