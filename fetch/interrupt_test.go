package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"go.uber.org/goleak"
)

// TestInterruptWithBlockedInput: an input that blocks in Read (a pipe or a
// terminal) does not hold up an interrupted run.
func TestInterruptWithBlockedInput(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // lets the abandoned reader go at the end
	go fmt.Fprintf(pw, "%s/a\n", tg.URL)
	e, err := fetch.New(fetch.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	w := &memWriter{}
	rep, err := e.Run(ctx, []input.Source{{Name: "-", R: pr}}, w)
	if !errors.Is(err, fetch.ErrInterrupted) || !rep.Interrupted {
		t.Fatalf("err %v, interrupted %v; want interrupted", err, rep.Interrupted)
	}
	// Tolerance: 300ms past the interrupt for scheduling under -race.
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("Run returned %s after start, interrupt at 200ms", el)
	}
	if len(w.recs) != 1 || !w.recs[0].OK {
		t.Errorf("records %+v, want the one line read", w.recs)
	}
}

// TestInterruptStopsAdmitting: after an interrupt no attempt starts: URLs
// waiting for a permit are cancelled at once (phase queue) while the one in
// flight finishes within the grace period.
func TestInterruptStopsAdmitting(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.HostConcurrency = 1
	start := time.Now()
	w, rep, err := runInterrupted(t, cfg, tg.URL+"/q")
	if !errors.Is(err, context.Canceled) || !rep.Interrupted {
		t.Fatalf("err %v, interrupted %v", err, rep.Interrupted)
	}
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Errorf("run took %s; the one request in flight needs 500ms", el)
	}
	if got := tg.Requests(); got != 1 {
		t.Errorf("target saw %d requests after the interrupt stopped admitting; want 1", got)
	}
	var ok, queued int
	for _, r := range w.recs {
		switch {
		case r.OK:
			ok++
		case r.Error.Kind == results.KindCancelled && r.Error.Phase == results.PhaseQueue && r.Attempts == 0:
			queued++
		default:
			t.Errorf("record %+v error %+v", r, r.Error)
		}
	}
	if ok != 1 {
		t.Errorf("%d ok, want the 1 in flight", ok)
	}
	if ok+queued != len(w.recs) {
		t.Errorf("records %d", len(w.recs))
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(*results.Record) error {
	w.n++
	return errors.New("disk full")
}

// TestWriteFailureStopsRun: when records cannot be written, fetching stops
// instead of going on with nothing recorded.
func TestWriteFailureStopsRun(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Rate = limits.Rate{N: 10, Per: time.Second}
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("%s/w/%d", tg.URL, i))
	}
	start := time.Now()
	_, err = e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, &failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err %v, want the write error", err)
	}
	// At 10/s the 30 URLs take 3s; the run must stop after the first record.
	if el := time.Since(start); el > time.Second {
		t.Errorf("run went on for %s after its output failed", el)
	}
	if got := tg.Requests(); got > 3 {
		t.Errorf("target saw %d requests", got)
	}
}

// TestQueueFailureIsNoAttempt: a URL whose deadline ends while it waits for
// a permit made no attempt.
func TestQueueFailureIsNoAttempt(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Rate = limits.Rate{N: 1, Per: time.Minute}
	cfg.Timeout = 300 * time.Millisecond
	recs, rep := run(t, cfg, tg.URL+"/1", tg.URL+"/2")
	var queued *results.Record
	for _, r := range recs {
		if !r.OK {
			queued = r
		}
	}
	if queued == nil || queued.Attempts != 0 || queued.Proxy != "" || queued.Error.Phase != results.PhaseQueue || queued.Error.Kind != results.KindDeadline {
		t.Fatalf("record %+v error %+v; want 0 attempts, queue/deadline", queued, queued.Error)
	}
	if a := rep.Proxies["direct"].Attempts; a != 1 {
		t.Errorf("report counts %d attempts, want 1", a)
	}
}

// TestSilentHTTPSProxyLeaksNothing: a TLS handshake with an https proxy
// that never answers ends at --connect-timeout even though net/http goes on
// dialling in the background after the attempt gave up.
func TestSilentHTTPSProxyLeaksNothing(t *testing.T) {
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fetch.DefaultConfig()
	cfg.ConnectTimeout = 200 * time.Millisecond
	cfg.Retries = 0
	cfg.ProxyMaxFailures = 0
	cfg.Concurrency = 4
	cfg.Proxies = []proxies.Proxy{proxyOf(t, "https://"+f.Silent, nil)}
	var lines []string
	for i := range 8 {
		lines = append(lines, fmt.Sprintf("https://127.0.0.1:1/%d", i))
	}
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Once the last record has arrived, and within another connect
	// timeout (tolerance: three), no TLS handshake may still be waiting
	// on the proxy: Run's own clean-up at its end must not be what ends
	// them, and Run waits on the writer until they have ended.
	w := &stackCheckWriter{t: t, after: len(lines), within: 3 * cfg.ConnectTimeout}
	if _, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, w); err != nil {
		t.Fatal(err)
	}
	for _, r := range w.recs {
		if r.Error == nil || r.Error.Phase != results.PhaseProxy || r.Error.Kind != results.KindTimeout {
			t.Errorf("record error %+v, want proxy/timeout", r.Error)
		}
	}
}

// stackCheckWriter, at its after-th record, fails the test if a goroutine
// is still in a TLS handshake once within has passed. The stacks are
// polled (pollUntil): a goroutine's end tells nothing to anyone else.
type stackCheckWriter struct {
	memWriter
	t      *testing.T
	after  int
	within time.Duration
}

func (w *stackCheckWriter) Write(r *results.Record) error {
	w.memWriter.Write(r)
	if len(w.recs) != w.after {
		return nil
	}
	buf := make([]byte, 4<<20)
	n := 0
	ended := pollUntil(w.within, func() bool {
		stacks := string(buf[:runtime.Stack(buf, true)])
		n = strings.Count(stacks, "crypto/tls.(*Conn).HandshakeContext")
		return n == 0
	})
	if !ended {
		w.t.Errorf("%d TLS handshakes with the silent proxy still open %v after the attempts ended", n, w.within)
	}
	return nil
}

// TestInterruptWithLinesReadAhead: lines read ahead of the workers but not
// taken when an interrupt comes get no record, and the run is reported
// interrupted (so that --resume takes them), even though every line was
// read.
func TestInterruptWithLinesReadAhead(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 4 // 4 in flight, 2 read ahead
	w, rep, err := runInterrupted(t, cfg, tg.URL+"/ahead")
	if !errors.Is(err, fetch.ErrInterrupted) || !rep.Interrupted {
		t.Fatalf("err %v, interrupted %v; want interrupted", err, rep.Interrupted)
	}
	if len(w.recs) != 4 || tg.Requests() != 4 {
		t.Fatalf("%d records, %d requests; want the 4 in flight", len(w.recs), tg.Requests())
	}
	for _, r := range w.recs {
		if !r.OK {
			t.Errorf("record %+v error %+v, want the ones in flight finished", r, r.Error)
		}
	}
}

// runInterrupted runs 6 URLs under prefix that take 500ms each, with a
// grace period of 3s, and interrupts the run after 250ms.
func runInterrupted(t *testing.T, cfg fetch.Config, prefix string) (*memWriter, *report.Report, error) {
	t.Helper()
	cfg.Grace = 3 * time.Second
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf("%s/%d?delay=500ms", prefix, i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(250*time.Millisecond, cancel)
	w := &memWriter{}
	rep, err := e.Run(ctx, []input.Source{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, w)
	return w, rep, err
}

// TestInterruptCutsExchanges: when an interrupted run's grace is over, a
// request waiting for its headers or for the rest of its body, direct and
// through an HTTP proxy, ends at once, cancelled in that phase: the
// engine's client cuts the connection the request waits on when the run's
// context ends. Tolerance: the run ends within 2 s of the interrupt; the
// target would hold each request for 10 s or more.
func TestInterruptCutsExchanges(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	for _, tc := range []struct {
		name, query, phase string
		proxied            bool
	}{
		{"headers direct", "hang=1", results.PhaseHeaders, false},
		{"body direct", "chunks=2&drip=10s&size=200", results.PhaseBody, false},
		{"headers via proxy", "hang=1", results.PhaseHeaders, true},
		{"body via proxy", "chunks=2&drip=10s&size=200", results.PhaseBody, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Grace = 0
			cfg.Retries = 0
			if tc.proxied {
				cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
			}
			e, err := fetch.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(300*time.Millisecond, cancel)
			w := &memWriter{}
			lines := fmt.Sprintf("%s/a?%s\n%s/b?%s\n", tg.URL, tc.query, tg.URL, tc.query)
			start := time.Now()
			_, err = e.Run(ctx, []input.Source{{Name: "u", R: strings.NewReader(lines)}}, w)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v, want context.Canceled", err)
			}
			if el := time.Since(start); el > 2300*time.Millisecond {
				t.Errorf("the run ended %s after its start, the interrupt after 300ms", el)
			}
			if len(w.recs) != 2 {
				t.Fatalf("%d records, want 2", len(w.recs))
			}
			for _, r := range w.recs {
				if r.OK || r.Error.Kind != results.KindCancelled || r.Error.Phase != tc.phase {
					t.Errorf("record %+v, error %+v: want cancelled in %s", r, r.Error, tc.phase)
				}
			}
		})
	}
}
