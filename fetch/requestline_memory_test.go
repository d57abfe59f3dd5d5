//go:build !race

package fetch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// bodyLines is an input of n JSON request lines, each a POST of a body of
// size bytes to base/sink, made as it is read: the test holds none of it.
type bodyLines struct {
	base       string
	n, size, i int
	pending    []byte // the rest of the line being read
	left       int    // body bytes of it still to come after pending
	tail       bool   // the line's end still to come
}

var bodyChunk = bytes.Repeat([]byte("a"), 64<<10)

func (b *bodyLines) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		switch {
		case b.left > 0:
			b.pending = bodyChunk[:min(b.left, len(bodyChunk))]
			b.left -= len(b.pending)
		case b.tail:
			b.pending, b.tail = []byte("\"}\n"), false
		case b.i < b.n:
			b.pending = fmt.Appendf(nil, `{"url":"%s/sink?i=%d","method":"POST","id":%d,"body":"`, b.base, b.i, b.i)
			b.left, b.tail = b.size, true
			b.i++
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// heapWriter counts records and, every every records, collects garbage and
// notes the live heap.
type heapWriter struct {
	every   int
	n       int
	ok      int
	samples []uint64
}

func (w *heapWriter) Write(r *results.Record) error {
	w.n++
	if r.OK && r.Status == http.StatusNoContent {
		w.ok++
	}
	if w.n%w.every == 0 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		w.samples = append(w.samples, m.HeapAlloc)
	}
	return nil
}

// TestRequestLinesMemory: a run over 200 JSON lines of 1 MiB bodies each
// (200 MiB of input) keeps the live heap flat, at what the lines in flight
// (-c 24) and those read ahead (at most 8 MiB of requests: see jobQueue)
// hold, not growing with the list: a body is held only while its URL is
// queued or in flight. The target answers each request after 400 ms, so
// that the reader (about 10 ms a line) keeps the queue full. The live heap
// is sampled after a collection every 20 records. Without the race
// detector, whose runtime changes the heap.
func TestRequestLinesMemory(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Add(n)
		select { // a slow target
		case <-time.After(400 * time.Millisecond):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	const lines, size, conc = 200, 1 << 20, 24
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = conc
	cfg.Retries = 0
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	w := &heapWriter{every: 20}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "big", R: &bodyLines{base: srv.URL, n: lines, size: size}}}, w)
	if err != nil || rep.Jobs != lines || w.ok != lines || got.Load() != lines*size {
		t.Fatalf("err %v, %d jobs, %d of %d ok with 204, %d body bytes received; by kind %v", err, rep.Jobs, w.ok, lines, got.Load(), rep.ByKind)
	}
	// 24 in flight and 8 MiB read ahead, the reader's line (its text and
	// its body) and the buffers of 24 connections: about 35 MiB. The
	// tolerance is 44 MiB, a fifth of the input. With the read-ahead
	// bounded only in lines (24 queued) it is about 51 MiB.
	const most = 44 << 20
	var peak uint64
	for _, s := range w.samples {
		live := s - min(s, before.HeapAlloc)
		peak = max(peak, live)
	}
	t.Logf("live heap over %d lines of %d KiB: %d samples, peak %d MiB above the start", lines, size>>10, len(w.samples), peak>>20)
	if peak > most {
		t.Errorf("live heap peaked at %d MiB above the start, want at most %d MiB", peak>>20, most>>20)
	}
}
