package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// conn returns an idle connection for key, or dials one (to a proxy when
// proxied).
func (t *Client) get(ctx context.Context, key string, proxied bool) (*conn, bool, error) {
	if pc := t.take(key); pc != nil {
		return pc, true, nil
	}
	c, err := t.dial(ctx, "tcp", key)
	if err != nil {
		if proxied {
			// as net/http names the dial of a proxy
			err = &net.OpError{Op: "proxyconnect", Net: "tcp", Err: err}
		}
		return nil, false, err
	}
	pc := &conn{key: key, c: c, limit: unlimited}
	pc.sock.init(c)
	b, ok := t.bufs.Get().(*connBufs)
	if ok {
		b.br.Reset(pc)
		b.bw.Reset(pc)
	} else {
		b = &connBufs{br: bufio.NewReaderSize(pc, 4<<10), bw: bufio.NewWriterSize(pc, 4<<10)}
	}
	pc.bufs, pc.br, pc.bw = b, b.br, b.bw
	return pc, false, nil
}

// take returns the most recently used idle connection for key that is not
// too old and still quiet, or nil. Nothing reads a connection while it is
// idle, so what its server did meanwhile is looked at now (see quiet): a
// connection the server closed, or one with bytes on it that no request
// asked for (an answer sent late, a 408 before closing), would otherwise
// give the next request a failure, or another request's answer. The look
// narrows that window, no more: what comes after it, while the request
// goes out, still meets the request (see RoundTrip for a close).
func (t *Client) take(key string) *conn {
	now := t.now()
	for {
		t.mu.Lock()
		list := t.idle[key]
		if len(list) == 0 {
			t.mu.Unlock()
			return nil
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		t.forget(pc, list[:len(list)-1])
		t.mu.Unlock()
		if now.Sub(pc.since) < t.idleTimeout && t.quiet(pc) {
			if t.onReuse != nil {
				t.onReuse(pc.c)
			}
			return pc
		}
		t.close(pc)
	}
}

// quiet reports whether pc's server has neither closed it nor sent
// anything since its last answer, from a look at its socket that does not
// wait (the socket is non-blocking, as Go makes every one). Bytes nobody
// asked for are warned about once, except a 408: servers send one before
// closing a connection that stayed idle, as net/http knows.
func (t *Client) quiet(pc *conn) bool {
	start, err := pc.peek()
	switch {
	case errors.Is(err, errWouldBlock):
		return true
	case err != nil, len(start) == 0: // an error, or the server closed it
		return false
	}
	if !bytes.HasPrefix(start, []byte("HTTP/1.1 408")) && !bytes.HasPrefix(start, []byte("HTTP/1.0 408")) {
		t.unsolicited(start, pc.key)
	}
	return false
}

// unsolicited warns, once, of bytes that arrived on a connection of key
// with no request to answer.
func (t *Client) unsolicited(start []byte, key string) {
	if t.warn != nil && t.warned.CompareAndSwap(false, true) {
		// net/http logs this each time; once is enough to know.
		t.warn(fmt.Sprintf("Unsolicited response received on idle HTTP channel starting with %q (from %s): its connection is closed", start, key))
	}
}

// put keeps pc as idle, closing the least recently used idle connection
// when there are more than the budget, or pc itself when its key has its
// share.
func (t *Client) put(pc *conn) {
	now := t.now()
	pc.since = now
	t.mu.Lock()
	// Close those idle for longer than the idle timeout, oldest first
	// (this key's among them, before its share is counted), then the
	// least recently used beyond the budget: each put closes what the puts
	// before it left.
	old := t.sweep(now, 0)
	list := t.idle[pc.key]
	if list == nil {
		list, t.spare = t.spare, nil
	}
	if len(list) >= t.perKey {
		t.mu.Unlock()
		t.close(pc)
		t.closeAll(old)
		return
	}
	t.idle[pc.key] = append(list, pc)
	pc.prev, pc.next = t.lru.prev, &t.lru
	pc.prev.next, t.lru.prev = pc, pc
	t.n++
	old = append(old, t.sweep(now, t.budget)...)
	t.mu.Unlock()
	t.closeAll(old)
}

// sweep takes out of the idle connections, oldest first, those idle for
// the idle timeout or longer, and then more while there are more than
// keep (none when keep is 0), and returns them, to be closed. Call with
// t.mu held.
func (t *Client) sweep(now time.Time, keep int) []*conn {
	var old []*conn
	for t.n > 0 {
		o := t.lru.next
		if (keep == 0 || t.n <= keep) && now.Sub(o.since) < t.idleTimeout {
			break
		}
		list := t.idle[o.key]
		copy(list, list[1:]) // the oldest of its key too
		list[len(list)-1] = nil
		t.forget(o, list[:len(list)-1])
		old = append(old, o)
	}
	return old
}

func (t *Client) closeAll(conns []*conn) {
	for _, pc := range conns {
		t.close(pc)
	}
}

// close closes pc and keeps its buffers for the next dial: a proxy that
// closes every connection after its answer has one dialled per request.
// Call only once nothing reads or writes pc's buffers.
func (t *Client) close(pc *conn) {
	pc.c.Close()
	if b := pc.bufs; b != nil {
		b.br.Reset(nil)
		b.bw.Reset(nil)
		pc.bufs, pc.br, pc.bw = nil, nil, nil
		t.bufs.Put(b)
	}
}

// connBufs are the buffers of a connection.
type connBufs struct {
	br *bufio.Reader
	bw *bufio.Writer
}

// forget takes pc out of the idle connections, list being what is left of
// its key's. Call with t.mu held.
func (t *Client) forget(pc *conn, list []*conn) {
	if len(list) == 0 {
		delete(t.idle, pc.key) // a crawl of millions of hosts keeps no entry per host
		if cap(list) > cap(t.spare) {
			t.spare = list // every element nil: take and sweep clear what they take out
		}
	} else {
		t.idle[pc.key] = list
	}
	pc.prev.next, pc.next.prev = pc.next, pc.prev
	pc.prev, pc.next = nil, nil
	t.n--
}

// CloseIdle closes every idle connection.
func (t *Client) CloseIdle() {
	t.mu.Lock()
	var all []*conn
	for pc := t.lru.next; pc != &t.lru; pc = pc.next {
		all = append(all, pc)
	}
	clear(t.idle)
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	t.n = 0
	t.mu.Unlock()
	for _, pc := range all {
		pc.prev, pc.next = nil, nil
		t.close(pc)
	}
}
