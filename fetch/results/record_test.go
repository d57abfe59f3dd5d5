package results

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// recordingWriter keeps each write made to it.
type recordingWriter struct{ writes [][]byte }

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// TestJSONLWriterWholeLines: every write that reaches the file ends at a
// line end, even when a record does not fit in what is left of the buffer
// or is larger than the buffer.
func TestJSONLWriterWholeLines(t *testing.T) {
	rw := &recordingWriter{}
	w := NewJSONLWriter(rw)
	for i := range 300 {
		size := 300 + i*7
		if i%50 == 49 {
			size = 100 << 10 // larger than the 64 KiB buffer
		}
		if err := w.Write(&Record{URL: "http://a/" + strings.Repeat("x", size), Line: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	for i, b := range rw.writes {
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("write %d of %d bytes does not end a line", i, len(b))
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines != 300 {
		t.Errorf("%d lines written, want 300", lines)
	}
}

// TestPhaseTimes: phases are set and got by name, written as JSON in the
// order the work passes through them, and read back as they were; a key
// that is not a phase is neither set nor read.
func TestPhaseTimes(t *testing.T) {
	var p PhaseTimes
	for _, k := range []string{"body", "queue", "tls", "connect", "headers"} {
		if !p.Set(k, map[string]float64{"body": 3.4, "queue": 0, "tls": 10.25, "connect": 1, "headers": 50.3}[k]) {
			t.Fatalf("Set(%q) refused", k)
		}
	}
	if p.Set("x-other", 2) || p.Set("", 2) {
		t.Error("Set took a key that is not a phase")
	}
	if ms, ok := p.Get("tls"); !ok || ms != 10.25 {
		t.Errorf("Get(tls) = %v, %v", ms, ok)
	}
	if ms, ok := p.Get("queue"); !ok || ms != 0 {
		t.Errorf("Get(queue) = %v, %v: a phase of 0 ms happened", ms, ok)
	}
	for _, k := range []string{"dns", "proxy", "x-other"} {
		if _, ok := p.Get(k); ok {
			t.Errorf("Get(%q) found a phase that did not happen", k)
		}
	}
	var order []string
	for k := range p.All() {
		order = append(order, k)
	}
	if got := strings.Join(order, " "); got != "queue connect tls headers body" {
		t.Errorf("All in the order %s", got)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"queue":0,"connect":1,"tls":10.25,"headers":50.3,"body":3.4}`
	if string(b) != want || p.String() != want {
		t.Errorf("got %s and %s, want %s", b, p.String(), want)
	}
	var back PhaseTimes
	back.Set("dns", 9) // cleared by the read
	if err := json.Unmarshal([]byte(`{"body":3.4,"x-other":2,"queue":0,"tls":10.25,"connect":1,"headers":50.3}`), &back); err != nil || back != p {
		t.Errorf("read back %v, %v; want %v", back, err, p)
	}
	if err := json.Unmarshal([]byte(`null`), &back); err != nil || back != p {
		t.Errorf("null changed the phases to %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"tls":"x"}`), &back); err == nil {
		t.Error("a phase that is not a number was read")
	}
	if b, _ := json.Marshal(PhaseTimes{}); string(b) != "{}" {
		t.Errorf("no phases: %s", b)
	}
}

// FuzzPhaseTimesJSON holds UnmarshalJSON, whose common case skips
// encoding/json's map, to what reading the same JSON into a map and
// setting its phases gives.
func FuzzPhaseTimesJSON(f *testing.F) {
	for _, s := range []string{
		`{"queue":0,"connect":0.05,"request":0.02,"headers":7.2,"body":0.04}`, `{}`, `null`, ` { } `,
		`{"x-other":2,"tls":1e3,"tls":-2.5E-3}`, `{ "dns" : 1 , "body":2 }`, `{"d\u006es":1}`, `{"dns":"1"}`,
		`{"dns":null}`, `{"dns":+1}`, `{"dns":1,}`, `{"dns":1}x`, `{"dns":01}`, `[1]`, `{"x":{"a":1}}`, `{"dns":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got PhaseTimes
		err := json.Unmarshal(b, &got)
		var m map[string]float64
		werr := json.Unmarshal(b, &m)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, werr)
		}
		if err != nil {
			return
		}
		var want PhaseTimes
		for k, v := range m {
			want.Set(k, v)
		}
		if got != want {
			t.Fatalf("%q: read %v, encoding/json's %v", b, got, want)
		}
	})
}

// phaseTimes are the phases of m, whose keys must be phases.
func phaseTimes(m map[string]float64) PhaseTimes {
	var p PhaseTimes
	for k, ms := range m {
		if !p.Set(k, ms) {
			panic("not a phase: " + k)
		}
	}
	return p
}
