package boundcopy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCopy: the copy stops after max bytes (all of them for -1),
// reads through short reads, and reports the reader's and writer's errors.
func TestCopy(t *testing.T) {
	src := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name string
		buf  int
		max  int64
		want int64
	}{
		{"all", 7, -1, 100},
		{"under the limit", 7, 101, 100},
		{"at the limit", 7, 100, 100},
		{"cut at the limit", 7, 42, 42},
		{"limit inside the first read", 64, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dst bytes.Buffer
			n, err := Copy(&dst, iotest.HalfReader(strings.NewReader(src)), make([]byte, tc.buf), tc.max)
			if err != nil || n != tc.want || int64(dst.Len()) != tc.want {
				t.Fatalf("copied %d (%d written), err %v; want %d", n, dst.Len(), err, tc.want)
			}
		})
	}
	broken := errors.New("broken")
	if _, err := Copy(io.Discard, iotest.ErrReader(broken), make([]byte, 8), -1); !errors.Is(err, broken) {
		t.Errorf("read error %v, want %v", err, broken)
	}
	if _, err := Copy(shortWriter{}, strings.NewReader(src), make([]byte, 8), -1); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short write: error %v, want io.ErrShortWrite", err)
	}
}

// shortWriter writes one byte less than it is given, without an error.
type shortWriter struct{}

func (shortWriter) Write(b []byte) (int, error) { return max(len(b)-1, 0), nil }

// TestHead: the first Max bytes are kept, whatever the writes.
func TestHead(t *testing.T) {
	h := &Head{Max: 5}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := h.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if string(h.B) != "abcde" {
		t.Errorf("kept %q, want %q", h.B, "abcde")
	}
}
