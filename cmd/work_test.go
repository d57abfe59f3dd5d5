package cmd

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	lb "github.com/fetch-dev/fetch/internal/loopback"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestWork_killAndJoin: three workers over one queue of 30,000 lines, a
// fourth joining halfway and one of the first killed with -9 then: every
// line has one final record in the union of the workers' files (the
// killed one started again on its file once its lines were taken over:
// no line recorded ok twice in a file), summarize and status agree, no proxy was ever over its cap (counted at the
// proxies), and the dead worker's lines were finished by the others within
// --claim-after plus 5 seconds.
func TestWork_killAndJoin(t *testing.T) { testWorkQueue(t, false) }

// TestWork_redisRestartAOF: the same, with Redis killed and restarted from
// its append-only file a third of the way through.
func TestWork_redisRestartAOF(t *testing.T) { testWorkQueue(t, true) }

func testWorkQueue(t *testing.T, restart bool) {
	const (
		n          = 30_000
		cap        = 4
		claimAfter = 3 * time.Second
		ns         = "q"
	)
	var rds *redistest.Server
	if restart {
		rds = redistest.StartAOF(t)
	} else {
		rds = redistest.Start(t)
	}
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var pxs []*countingProxy
	var pxArgs []string
	for i := range 3 {
		p := startCountingProxy(t, fetchtest.LoopbackIP(i))
		pxs = append(pxs, p)
		pxArgs = append(pxArgs, "--proxy", p.URL)
	}
	dir := t.TempDir()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s/w?i=%d&size=16\n", target.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", b.String())
	enq := startFetch(t, "", "enqueue", "-q", "--redis", rds.URL, "--namespace", ns, urls)
	if code := enq.wait(t, time.Minute); code != ExitOK {
		t.Fatalf("enqueue: exit %d; stderr:\n%s", code, enq.stderr)
	}

	var workers []*proc
	var outs []string
	// startWorker starts a worker writing to out, a new file when "".
	startWorker := func(out string) *proc {
		if out == "" {
			out = filepath.Join(dir, fmt.Sprintf("w%d.jsonl", len(outs)+1))
			outs = append(outs, out)
		}
		args := append([]string{"work", "-q", "--redis", rds.URL, "--namespace", ns, "-c", "8",
			"--proxy-concurrency", strconv.Itoa(cap), "--lease-ttl", "1s", "--claim-after", claimAfter.String(), "-o", out}, pxArgs...)
		p := startFetch(t, "", args...)
		workers = append(workers, p)
		return p
	}
	for range 3 {
		startWorker("")
	}
	done := func() int {
		v, _ := rds.Do("HGET", "{"+ns+"}:q:stats", "done")
		s, _ := v.(string)
		d, _ := strconv.Atoi(s)
		return d
	}
	explain := func() {
		for i, w := range workers {
			t.Logf("worker %d stderr:\n%s", i+1, w.stderr)
		}
	}
	if restart {
		waitFor(t, time.Minute, "a third of the lines done", func() bool { return done() >= n/3 }, explain)
		rds.Stop() // kill -9
		rds.Restart()
		t.Logf("Redis restarted from its AOF at %d lines done; now %d", n/3, done())
	}
	waitFor(t, 2*time.Minute, "half the lines done", func() bool { return done() >= n/2 }, explain)

	// Halfway: the fourth joins, and the second is killed, then started
	// again on its file.
	startWorker("")
	victim := workers[1]
	name := consumerOf(t, rds, ns, victim.cmd.Process.Pid)
	held := pendingOf(t, rds, ns, name)
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	killed := time.Now()
	t.Logf("killed worker 2 (%s) holding %d lines at %d done", name, len(held), done())
	const slack = 5 * time.Second // the claim's poll, the fetch and the write, on a loaded machine
	waitFor(t, claimAfter+slack, "the dead worker's lines finished by the others", func() bool {
		for _, id := range held {
			v, _ := rds.Do("XRANGE", "{"+ns+"}:q", id, id)
			if l, _ := v.([]any); len(l) > 0 {
				return false // an entry is deleted when acknowledged
			}
		}
		return true
	}, explain)
	t.Logf("the dead worker's lines were finished %s after the kill", time.Since(killed).Round(time.Millisecond))
	startWorker(outs[1])

	for i, w := range workers {
		if i == 1 {
			continue
		}
		if code := w.wait(t, 2*time.Minute); code != ExitOK {
			t.Fatalf("worker %d: exit %d; stderr:\n%s", i+1, code, w.stderr)
		}
	}

	// Every line has one final record in the union; no worker recorded a
	// line ok twice.
	final := map[int]int{}
	dups := 0
	for i, out := range outs {
		ok := map[int]bool{}
		for _, r := range recordsOf(t, out) {
			if r.OK && ok[r.Line] {
				t.Errorf("worker %d recorded line %d ok twice", i+1, r.Line)
			}
			ok[r.Line] = ok[r.Line] || r.OK
			if r.Input != urls {
				t.Errorf("worker %d: record of input %q, want %q", i+1, r.Input, urls)
			}
			if r.Error == nil || r.Error.Kind != results.KindCancelled {
				final[r.Line]++
			}
		}
		t.Logf("worker %d: %d records", i+1, len(ok))
		if len(ok) == 0 {
			t.Errorf("worker %d recorded no line", i+1)
		}
	}
	for line := 1; line <= n; line++ {
		switch final[line] {
		case 0:
			t.Errorf("line %d has no final record", line)
		case 1:
		default:
			dups++
		}
	}
	t.Logf("%d lines recorded by two workers (claimed from the dead one)", dups)

	summarizeAllOK(t, n, outs...)

	if st := queueStatus(t, rds, ns); st.Enqueued != n || st.Done != n || st.Pending != 0 || st.Failed != 0 || st.Workers != 0 {
		t.Errorf("status: %+v; want %d enqueued and done, none pending, failed or alive", st, n)
	}

	for i, p := range pxs {
		requests, most := p.stats()
		t.Logf("proxy %d: %d requests, at most %d in flight", i+1, requests, most)
		if most > cap {
			t.Errorf("proxy %d had %d in flight at once across the workers, cap %d", i+1, most, cap)
		}
	}
}

// consumerOf is the consumer name of the worker of process pid, waiting
// until it has joined.
func consumerOf(t *testing.T, rds *redistest.Server, ns string, pid int) string {
	t.Helper()
	var name string
	waitFor(t, 10*time.Second, fmt.Sprintf("process %d in the group", pid), func() bool {
		v, err := rds.Do("XINFO", "CONSUMERS", "{"+ns+"}:q", "workers")
		if err != nil {
			t.Fatal(err)
		}
		l, _ := v.([]any)
		for _, c := range l {
			var fields map[any]any
			switch c := c.(type) {
			case map[any]any: // RESP3
				fields = c
			case []any: // RESP2: name, value, ...
				fields = map[any]any{}
				for i := 0; i+1 < len(c); i += 2 {
					fields[c[i]] = c[i+1]
				}
			}
			if s, _ := fields["name"].(string); strings.Contains(s, fmt.Sprintf(":%d:", pid)) {
				name = s
				return true
			}
		}
		return false
	})
	return name
}

// pendingOf lists the ids of the entries consumer holds.
func pendingOf(t *testing.T, rds *redistest.Server, ns, consumer string) []string {
	t.Helper()
	v, err := rds.Do("XPENDING", "{"+ns+"}:q", "workers", "-", "+", 100000, consumer)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range v.([]any) {
		ids = append(ids, e.([]any)[0].(string))
	}
	return ids
}

// countingProxy is a Go forward proxy that counts the requests it has in
// flight, from a request's arrival until just before it writes the last
// byte of the answer: no client can have the whole answer, and start its
// next request with the permit it gives back, before the count is down.
// (fetchtest.Proxy counts until its handler has returned, after the last
// byte is flushed: a request that another process starts in between is
// counted over the cap, which 30,000 tiny answers on a loaded machine
// hit now and then, in a plain sharded run as well.)
type countingProxy struct {
	*lb.Proxy
	mu             sync.Mutex
	now, most, all int
}

func startCountingProxy(t *testing.T, bindIP string) *countingProxy {
	t.Helper()
	c := &countingProxy{}
	p, err := lb.StartHTTPProxy(lb.ProxyOptions{BindIP: bindIP, Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.mu.Lock()
			c.now++
			c.all++
			c.most = max(c.most, c.now)
			c.mu.Unlock()
			cw := &countingWriter{ResponseWriter: w, c: c}
			defer cw.end()
			next.ServeHTTP(cw, r)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c.Proxy = p
	return c
}

func (c *countingProxy) stats() (requests, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all, c.most
}

// countingWriter ends its request's count before the write that completes
// the answer's Content-Length, or when the handler returns.
type countingWriter struct {
	http.ResponseWriter
	c       *countingProxy
	written int64
	ended   bool
}

func (w *countingWriter) end() {
	if !w.ended {
		w.ended = true
		w.c.mu.Lock()
		w.c.now--
		w.c.mu.Unlock()
	}
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil && w.written+int64(len(p)) >= n {
		w.end()
	}
	w.written += int64(len(p))
	return w.ResponseWriter.Write(p)
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
