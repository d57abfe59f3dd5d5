package results

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// randString draws strings that exercise every escape: ASCII, control
// characters, quotes and backslashes, HTML characters, multi-byte runes,
// U+2028/U+2029 and invalid UTF-8.
func randString(rng *rand.Rand) string {
	pieces := []string{"a", "Z", "/", "?", "=", "&", "<", ">", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f",
		"é", "日本", "\u2028", "\u2029", "\U0001F600", "\xff", "\xe2\x80", "\xed\xa0\x80", "https://a.example/x?q=1", " "}
	var sb strings.Builder
	for range rng.IntN(12) {
		sb.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return sb.String()
}

func randFloat(rng *rand.Rand) float64 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.Round(rng.Float64()*1e6) / 100 // as millis writes them
	case 2:
		return rng.Float64() * 1e-7 // 'e' format, small
	case 3:
		return (rng.Float64() + 1) * 1e21 // 'e' format, large
	case 4:
		return -rng.Float64() * 1e3
	}
	return rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
}

func randPhases(rng *rand.Rand) PhaseTimes {
	var p PhaseTimes
	for range rng.IntN(10) {
		p.Set(Phases[rng.IntN(len(Phases))], math.Round(rng.Float64()*1e5)/100)
	}
	return p
}

func randError(rng *rand.Rand) *Error {
	if rng.IntN(2) == 0 {
		return nil
	}
	return &Error{Phase: randString(rng), Kind: randString(rng), Message: randString(rng)}
}

func randRecord(rng *rand.Rand) *Record {
	r := &Record{URL: randString(rng), Input: randString(rng), Line: rng.IntN(1 << 20), OK: rng.IntN(2) == 0,
		Status: rng.IntN(600), Attempts: rng.IntN(5), Bytes: rng.Int64N(1 << 40), ElapsedMS: randFloat(rng),
		Phases: randPhases(rng), Error: randError(rng), Body: []byte("not written")}
	if rng.IntN(2) == 0 {
		r.Proxy = randString(rng)
	}
	if rng.IntN(3) == 0 {
		r.Pool = randString(rng)
	}
	if rng.IntN(3) == 0 {
		r.File = randString(rng)
	}
	if rng.IntN(4) == 0 {
		r.ID = json.RawMessage([]string{`"item-17"`, `17`, `-1.5e3`, `"a\u2028b"`}[rng.IntN(4)])
	}
	if rng.IntN(4) == 0 {
		r.Meta = json.RawMessage([]string{`{"batch": 3, "error": {"kind": "x"}}`, "[1, 2,\n 3]", `null`, `"<&>"`}[rng.IntN(4)])
	}
	if rng.IntN(3) == 0 {
		r.FinalURL = randString(rng)
		for range rng.IntN(3) {
			r.Redirects = append(r.Redirects, Redirect{Status: 300 + rng.IntN(9), URL: randString(rng)})
		}
		r.Proto = randString(rng)
		r.RemoteAddr = randString(rng)
		r.ContentType = randString(rng)
		r.ContentLength = json.Number([]string{"", "0", "1024", "18446744073709551615"}[rng.IntN(4)])
		r.SHA256 = randString(rng)
	}
	if rng.IntN(4) == 0 {
		r.TLS = &TLS{Version: randString(rng), Cipher: randString(rng), ALPN: randString(rng), ServerName: randString(rng),
			CertNotAfter: randString(rng), CertIssuer: randString(rng)}
	}
	if rng.IntN(4) == 0 {
		r.Headers = Headers{}
		for range rng.IntN(4) {
			var vs []string
			for range rng.IntN(3) {
				vs = append(vs, randString(rng))
			}
			r.Headers[randString(rng)] = vs
		}
	}
	if rng.IntN(4) == 0 {
		r.ProxyStatus = &ProxyStatus{Proxy: randString(rng), Error: randString(rng), Details: randString(rng)}
	}
	if rng.IntN(5) > 0 {
		r.Tries = []Try{}
		for range rng.IntN(3) {
			t := Try{Status: rng.IntN(600), ElapsedMS: randFloat(rng), Phases: randPhases(rng), Error: randError(rng)}
			if rng.IntN(2) == 0 {
				t.Proxy = randString(rng)
			}
			if rng.IntN(3) == 0 {
				t.Pool = randString(rng)
			}
			r.Tries = append(r.Tries, t)
		}
	}
	return r
}

// TestAppendRecord checks the hand-written encoder against encoding/json
// (an Encoder without HTML escaping, as the writer used to be) on random
// records: the same bytes, and lines that decode back to the record.
func TestAppendRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 5))
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	var got bytes.Buffer
	w := NewJSONLWriter(&got)
	for i := range 20000 {
		r := randRecord(rng)
		want.Reset()
		got.Reset()
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got.Bytes(), want.Bytes())
		}
	}
}

// TestAppendRecord_badFloat: NaN and infinities fail, as with
// encoding/json, and nothing is written.
func TestAppendRecord_badFloat(t *testing.T) {
	for _, r := range []*Record{
		{ElapsedMS: math.NaN()},
		{Phases: phaseTimes(map[string]float64{"dns": math.Inf(1)})},
		{Tries: []Try{{ElapsedMS: math.Inf(-1)}}},
	} {
		if _, err := json.Marshal(r); err == nil {
			t.Fatalf("encoding/json took %+v", r)
		}
		var out bytes.Buffer
		w := NewJSONLWriter(&out)
		if err := w.Write(r); err == nil {
			t.Errorf("Write(%+v) = nil, want an error", r)
		}
		w.Flush()
		if out.Len() > 0 {
			t.Errorf("wrote %q", out.Bytes())
		}
	}
}

// TestScanRecord: LoadDone's quick reader gets the URL, input, line and
// how the record ended (cancelled, coordinator, banned in queue or final) exactly as
// encoding/json does, from
// records written by the writer and by encoding/json with HTML escaping
// (as results files of older versions are), whatever their strings hold.
func TestScanRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var out bytes.Buffer
	w := NewJSONLWriter(&out)
	var scratch [2][]byte
	kinds := []string{KindCancelled, KindCoordinator, KindStatus, KindBanned, KindBanned, "cancelledx", "coordinatorx", ""}
	for i := range 20000 {
		r := randRecord(rng)
		r.Line = 1 + rng.IntN(1<<20)
		if r.URL == "" {
			r.URL = "u"
		}
		if r.Input == "" {
			r.Input = "-"
		}
		if k := kinds[rng.IntN(len(kinds))]; k != "" {
			r.Error = &Error{Phase: randString(rng), Kind: k, Message: randString(rng) + `"kind":"cancelled"`}
			if rng.IntN(2) == 0 {
				r.Error.Phase = PhaseQueue
			}
		} else {
			r.Error = nil
		}
		out.Reset()
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		html, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range [][]byte{out.Bytes(), append(html, '\n')} {
			var want struct {
				URL   string `json:"url"`
				Input string `json:"input"`
				Line  int    `json:"line"`
				Error *struct {
					Phase string `json:"phase"`
					Kind  string `json:"kind"`
				} `json:"error"`
			}
			if err := json.Unmarshal(line, &want); err != nil {
				t.Fatal(err)
			}
			url, input, n, end, ok := scanRecord(line, &scratch)
			if !ok {
				t.Fatalf("record %d not read: %s", i, line)
			}
			wantEnd := EndFinal
			if want.Error != nil && want.Error.Kind == KindCancelled {
				wantEnd = EndCancelled
			} else if want.Error != nil && want.Error.Kind == KindCoordinator {
				wantEnd = EndCoordinator
			} else if want.Error != nil && want.Error.Kind == KindBanned && want.Error.Phase == PhaseQueue {
				wantEnd = EndHostBanned
			}
			if DoneKey(n, url) != DoneKey(want.Line, want.URL) {
				t.Fatalf("record %d: the key of the bytes read differs from the decoded record's", i)
			}
			if string(url) != want.URL || string(input) != want.Input || n != want.Line || end != wantEnd {
				t.Fatalf("record %d: got %q %q %d %v, want %q %q %d %v\n%s", i, url, input, n, end, want.URL, want.Input, want.Line, wantEnd, line)
			}
		}
	}
}

// TestAppendHundredths: the fast path formats every whole number of
// hundredths it takes as strconv does (all of them up to 3,000 ms, and
// random ones up to 1e13, and what millis makes of random durations),
// and leaves every other float, -0 among them, to strconv.
func TestAppendHundredths(t *testing.T) {
	check := func(f float64, want bool) {
		t.Helper()
		got, ok := appendHundredths(nil, f)
		if ok != want {
			t.Fatalf("%v (%b): taken %v, want %v", f, math.Float64bits(f), ok, want)
		}
		if s := strconv.FormatFloat(f, 'f', -1, 64); ok && string(got) != s {
			t.Fatalf("%v: %q, strconv %q", f, got, s)
		}
	}
	for k := range int64(300_001) {
		check(float64(k)/100, true)
	}
	rng := rand.New(rand.NewPCG(3, 7))
	for range 200_000 {
		check(float64(rng.Int64N(1e15))/100, true)
		check(millis(time.Duration(rng.Int64N(int64(100*24*time.Hour)))), true)
	}
	tenth := 0.1 // a variable: 0.1 + 0.2 as constants is exactly 0.3
	for _, f := range []float64{math.Copysign(0, -1), -0.01, -1, 1e13, 1e13 + 0.5, 0.001, 1.005, tenth + 0.2, 1.0 / 3, math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64} {
		check(f, false)
	}
}

// TestPhaseTimesFormat: phases are written in 'f' format whatever their
// size, times from millis by the fast path, others by strconv.
func TestPhaseTimesFormat(t *testing.T) {
	b, err := phaseTimes(map[string]float64{"queue": 1e-7, "connect": 12.5, "headers": 1e21, "body": 0.07}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"queue":0.0000001,"connect":12.5,"headers":1000000000000000000000,"body":0.07}`
	if string(b) != want {
		t.Errorf("%s, want %s", b, want)
	}
}

// millis is the engine's conversion of a duration to the milliseconds of a
// record: rounded to a hundredth.
func millis(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}

// TestAppendRecord_badRaw: an id, meta or content_length that is not what
// its field holds fails, as with encoding/json, and nothing is written.
func TestAppendRecord_badRaw(t *testing.T) {
	for _, r := range []*Record{
		{ID: json.RawMessage(`{"a":`)},
		{Meta: json.RawMessage(`nope`)},
		{Facts: Facts{ContentLength: "+5"}},
		{Facts: Facts{ContentLength: "007"}},
	} {
		if _, err := json.Marshal(r); err == nil {
			t.Fatalf("encoding/json took %+v", r)
		}
		var out bytes.Buffer
		w := NewJSONLWriter(&out)
		if err := w.Write(r); err == nil {
			t.Errorf("Write(%+v) = nil, want an error", r)
		}
		w.Flush()
		if out.Len() > 0 {
			t.Errorf("wrote %q", out.Bytes())
		}
	}
}
