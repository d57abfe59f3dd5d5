package input

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
)

// Markers put in header values and bodies: no message or shown URL may
// hold them.
const (
	hdrMark  = "hDrSeCrEt"
	bodyMark = "bOdYsEcReT"
)

// linesOf reads data as the input "in" with bodies of at most maxBody
// bytes and returns its lines parsed.
func linesOf(t testing.TB, data string, maxBody int64) []*Line {
	t.Helper()
	s := NewScanner(Source{Name: "in", R: strings.NewReader(data)}, Shard{}, nil)
	s.SetMaxRequestBody(maxBody)
	var out []*Line
	for s.Scan() {
		out = append(out, s.Line())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJSONLineValid: each field of a JSON request line reaches its Line
// as written: the method, the header (names canonical, a list kept in
// order), the body in text or base64, id and meta compacted; user
// information is not shown.
func TestJSONLineValid(t *testing.T) {
	bin := []byte{0, 1, 2, 0xff, '\n', '"'}
	for _, tt := range []struct {
		name, line string
		shown      string
		want       Request
	}{
		{"url only", `{"url":"http://a.example/x"}`, "http://a.example/x", Request{}},
		{"spaces around", "  {\"url\" : \"https://a.example/\" }  ", "https://a.example/", Request{}},
		{"method", `{"url":"http://a/","method":"PATCH"}`, "http://a/", Request{Method: "PATCH"}},
		{"null fields", `{"url":"http://a/","method":null,"header":null,"body":null,"body_base64":null,"id":null}`, "http://a/", Request{}},
		{"header", `{"url":"http://a/","header":{"x-tag":["a","b"],"Content-Type":"text/plain","X-Empty":[]}}`, "http://a/",
			Request{Header: http.Header{"X-Tag": {"a", "b"}, "Content-Type": {"text/plain"}, "X-Empty": nil}}},
		{"body", `{"url":"http://a/","method":"POST","body":"{\"q\":1}\n"}`, "http://a/", Request{Method: "POST", Body: []byte("{\"q\":1}\n")}},
		{"empty body", `{"url":"http://a/","body":""}`, "http://a/", Request{}},
		{"base64", `{"url":"http://a/","body_base64":"` + base64.StdEncoding.EncodeToString(bin) + `"}`, "http://a/", Request{Body: bin}},
		{"id string", `{"url":"http://a/","id":"item-17"}`, "http://a/", Request{ID: []byte(`"item-17"`)}},
		{"id number", `{"url":"http://a/","id": -1.5e3}`, "http://a/", Request{ID: []byte(`-1.5e3`)}},
		{"meta", `{"url":"http://a/","meta":{ "batch" : [1, 2] }}`, "http://a/", Request{Meta: []byte(`{"batch":[1,2]}`)}},
		{"meta null", `{"url":"http://a/","meta":null}`, "http://a/", Request{Meta: []byte(`null`)}},
		{"credentials", `{"url":"http://user:pw@a/x"}`, "http://a/x", Request{}},
		{"escaped url", `{"url":"http://a/\u0078?q=\"1\""}`, `http://a/x?q="1"`, Request{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ls := linesOf(t, "# c\n"+tt.line+"\n", DefaultMaxRequestBody)
			if len(ls) != 1 {
				t.Fatalf("%d lines", len(ls))
			}
			l := ls[0]
			if l.Invalid != "" || l.URL == nil || l.Number != 2 {
				t.Fatalf("line %d invalid %q url %v", l.Number, l.Invalid, l.URL)
			}
			if l.Shown != tt.shown {
				t.Errorf("shown %q, want %q", l.Shown, tt.shown)
			}
			if !reflect.DeepEqual(*l.Request, tt.want) {
				t.Errorf("request %+v, want %+v", *l.Request, tt.want)
			}
		})
	}
}

// TestJSONLineInvalid: a JSON line that cannot be fetched is invalid with
// a message naming the field at fault, never quoting a header value or
// the body, and shows its URL (without user information) when it has one.
func TestJSONLineInvalid(t *testing.T) {
	const u = `"url":"http://u:pw@a.example/x"`
	big := strings.Repeat("b", 101)
	for _, tt := range []struct {
		line, says, shown string
	}{
		{`{"url":"http://a/",` + hdrMark, "not valid JSON", ""},
		{`{"url":"http://a/"} {"body":"` + bodyMark + `"}`, "not valid JSON", ""},
		{`{` + u + `,"body":"` + bodyMark + `","body_base64":"` + bodyMark + `"}`, `"body" and "body_base64"`, "http://a.example/x"},
		{`{` + u + `,"body":"` + bodyMark + big + `"}`, `"body" is longer than 100 bytes`, "http://a.example/x"},
		{`{` + u + `,"body_base64":"` + base64.StdEncoding.EncodeToString([]byte(bodyMark+big)) + `"}`, `"body_base64" is longer than 100 bytes`, "http://a.example/x"},
		{`{` + u + `,"body_base64":"` + bodyMark + `!"}`, `"body_base64" is not standard base64`, "http://a.example/x"},
		{`{` + u + `,"body":{"x":"` + bodyMark + `"}}`, `"body" is not a string`, "http://a.example/x"},
		{`{` + u + `,"header":{"X-A":"` + hdrMark + `\r\nX-B: 1"}}`, `"header" X-A: value holds a line break`, "http://a.example/x"},
		{`{` + u + `,"header":{"X-A":["ok",{"v":"` + hdrMark + `"}]}}`, `"header" X-A: value is not a string or a list`, "http://a.example/x"},
		{`{` + u + `,"header":{"X-A":7}}`, `"header" X-A: value is not a string`, "http://a.example/x"},
		{`{` + u + `,"header":{"Bad Name":"` + hdrMark + `"}}`, `"header" has a name that is not a header name`, "http://a.example/x"},
		{`{` + u + `,"header":["X-A: ` + hdrMark + `"]}`, `"header" is not an object`, "http://a.example/x"},
		{`{` + u + `,"header":{"content-length":"5"}}`, `"header" Content-Length`, "http://a.example/x"},
		{`{` + u + `,"method":"GET /x"}`, `"method" is not a method`, "http://a.example/x"},
		{`{` + u + `,"method":7}`, `"method" is not a string`, "http://a.example/x"},
		{`{` + u + `,"id":{"a":1}}`, `"id" is not a string or a number`, "http://a.example/x"},
		{`{` + u + `,"id":true}`, `"id" is not a string or a number`, "http://a.example/x"},
		{`{` + u + `,"meta":"` + strings.Repeat("m", MaxMetaBytes) + `"}`, `"meta" is longer than 4096 bytes`, "http://a.example/x"},
		{`{` + u + `,"headers":{"X-A":"` + hdrMark + `"}}`, `unknown field "headers"`, "http://a.example/x"},
		{`{"method":"POST","body":"` + bodyMark + `"}`, `"url" is missing`, ""},
		{`{"url":null}`, `"url" is missing`, ""},
		{`{"url":["http://a/"]}`, `"url" is not a string`, ""},
		{`{"url":"ftp://u:pw@a/"}`, `"url": unsupported scheme`, "ftp://a/"},
		{`{"url":"a.example/x","body":"` + bodyMark + `"}`, `"url": not an absolute URL`, "a.example/x"},
		{`{"url":"http://a/` + strings.Repeat("p", MaxLineBytes) + `"}`, `"url" is longer than 8192 bytes`, "http://a/" + strings.Repeat("p", keptOfLong-len("http://a/")) + "..."},
		{`["http://a/"]`, "", ""}, // not a JSON line: parsed as a URL
		{`{"url":"http://a/","body":"` + bodyMark + strings.Repeat("x", 2*100+jsonLineRoom) + `"}`, "JSON request line longer than", ""},
	} {
		ls := linesOf(t, tt.line+"\nhttp://next/\n", 100)
		if len(ls) != 2 || ls[1].Invalid != "" || ls[1].Shown != "http://next/" {
			t.Fatalf("%.80s: lines %+v, want it and http://next/", tt.line, ls)
		}
		l := ls[0]
		if l.Invalid == "" || l.URL != nil {
			t.Errorf("%.80s: valid, url %v", tt.line, l.URL)
			continue
		}
		if !strings.Contains(l.Invalid, tt.says) {
			t.Errorf("%.80s: message %q, want %q in it", tt.line, l.Invalid, tt.says)
		}
		if tt.says != "" && l.Shown != tt.shown {
			t.Errorf("%.80s: shown %q, want %q", tt.line, l.Shown, tt.shown)
		}
		for _, s := range []string{l.Invalid, l.Shown} {
			for _, m := range []string{hdrMark, bodyMark, "pw"} {
				if strings.Contains(s, m) {
					t.Errorf("%.80s: %q holds %q", tt.line, s, m)
				}
			}
		}
	}
}

// TestJSONLineKeepsIDOfInvalid: an invalid line's valid id and meta are
// kept for its record.
func TestJSONLineKeepsIDOfInvalid(t *testing.T) {
	l := linesOf(t, `{"url":"http://a/","id":"x-1","meta":[1],"body":7}`, 100)[0]
	if l.Invalid == "" || l.Request == nil || string(l.Request.ID) != `"x-1"` || string(l.Request.Meta) != `[1]` {
		t.Fatalf("invalid %q request %+v", l.Invalid, l.Request)
	}
}

// TestJSONLineLength: a JSON line may be far longer than a URL line, as
// its body allows (twice its limit and 64 KiB); a longer one is read to
// its end and is invalid, and the lines after it are read as ever. The
// buffer of long lines is reused.
func TestJSONLineLength(t *testing.T) {
	body := strings.Repeat("b", 100<<10)
	line := `{"url":"http://a/","body":"` + body + `"}`
	data := line + "\r\n" + "\ufeff" + line + "\n" + `{"url":"http://a/","body":"` + strings.Repeat("x", 3<<20) + "\"}\nhttp://a/z"
	ls := linesOf(t, data, 1<<20)
	if len(ls) != 4 {
		t.Fatalf("%d lines, want 4", len(ls))
	}
	for _, l := range ls[:2] {
		if l.Invalid != "" || string(l.Request.Body) != body {
			t.Errorf("line %d: invalid %q, body of %d bytes", l.Number, l.Invalid, len(l.Request.Body))
		}
	}
	if l := ls[2]; !strings.Contains(l.Invalid, "longer than") || l.Shown != "" {
		t.Errorf("line 3: invalid %q shown %q", l.Invalid, l.Shown)
	}
	if l := ls[3]; l.Invalid != "" || l.Shown != "http://a/z" {
		t.Errorf("line 4: %+v", l)
	}
	// A plain line keeps its limit.
	ls = linesOf(t, "http://a/"+strings.Repeat("p", MaxLineBytes)+"\n", 1<<20)
	if !strings.Contains(ls[0].Invalid, "line longer than 8192") {
		t.Errorf("long URL line: %q", ls[0].Invalid)
	}
}

// TestJSONLineShard: a JSON line is in the shard of its URL as written, so
// a line whose method, header or body changes stays in its shard; a
// plain line of the same URL at the same place is in the same one.
func TestJSONLineShard(t *testing.T) {
	const n = 7
	for i := range 50 {
		u := fmt.Sprintf("http://h%d.example/p?i=%d", i, i)
		plain := u + "\n"
		json := fmt.Sprintf(`  {"method":"POST","url":" %s ","body":"%d"}`+"\n", u, i)
		var got []int
		for _, data := range []string{plain, json} {
			for k := 1; k <= n; k++ {
				s := NewScanner(Source{Name: "in", R: strings.NewReader(data)}, Shard{K: k, N: n}, nil)
				for s.Scan() {
					got = append(got, k)
				}
			}
		}
		if len(got) != 2 || got[0] != got[1] {
			t.Fatalf("%s: in shards %v, want one, the same for both lines", u, got)
		}
	}
}

// TestJSONLineResume: --resume finds a JSON line's record by its input,
// line and shown URL, as any other line's; a line whose URL changed since
// is taken again.
func TestJSONLineResume(t *testing.T) {
	data := `{"url":"http://u:pw@a/1","body":"x"}` + "\n" +
		`{"url":"http://a/2","method":"PUT"}` + "\n" +
		"http://a/3\n" +
		`{"url":"http://a/4-changed"}` + "\n"
	var recs bytes.Buffer
	for i, u := range []string{"http://a/1", "http://a/2", "http://a/3", "http://a/4"} {
		fmt.Fprintf(&recs, "{\"url\":%q,\"input\":\"in\",\"line\":%d,\"ok\":true,\"error\":null}\n", u, i+1)
	}
	done, err := results.LoadDone(&recs)
	if err != nil {
		t.Fatal(err)
	}
	s := NewScanner(Source{Name: "in", R: strings.NewReader(data)}, Shard{}, done)
	var taken []int
	for s.Scan() {
		if !s.Done() {
			taken = append(taken, s.Line().Number)
		}
	}
	if !reflect.DeepEqual(taken, []int{4}) {
		t.Errorf("lines taken %v, want [4]", taken)
	}
	n, err := Count(t.Context(), Source{Name: "in", R: strings.NewReader(data)}, Shard{}, done, 0)
	if err != nil || n != 1 {
		t.Errorf("Count %d, %v; want 1", n, err)
	}
}

// TestCountWithMaxBody: Count takes the lines a Scanner with the same
// --max-request-body takes, when a JSON line is longer than the default's
// limit and --resume finished it: the progress bar's total is what the run
// takes. (With the default's limit such a line is invalid, shows no URL,
// and is not found finished.)
func TestCountWithMaxBody(t *testing.T) {
	body := strings.Repeat("x", 3<<20)
	data := `{"url":"http://a.example/1","body":"` + body + `"}` + "\nhttp://a.example/2\n"
	done, err := results.LoadDone(strings.NewReader(`{"url":"http://a.example/1","input":"in","line":1,"ok":true,"error":null}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewScanner(Source{Name: "in", R: strings.NewReader(data)}, Shard{}, done)
	s.SetMaxRequestBody(4 << 20)
	var taken int64
	for s.Scan() {
		if !s.Done() {
			taken++
		}
	}
	n, err := Count(t.Context(), Source{Name: "in", R: strings.NewReader(data)}, Shard{}, done, 4<<20)
	if err != nil || n != taken || n != 1 {
		t.Errorf("Count %d, %v; the scanner took %d; want 1", n, err, taken)
	}
}

// TestRequestSize: the bytes a request holds, by which the engine bounds
// what it reads ahead.
func TestRequestSize(t *testing.T) {
	var none *Request
	r := &Request{Method: "PUT", Header: http.Header{"X-A": {"12", "3"}}, Body: make([]byte, 1000), ID: []byte(`"i"`)}
	if none.Size() != 0 || r.Size() != 3+3+3+1000+3 {
		t.Errorf("sizes %d and %d", none.Size(), r.Size())
	}
}

// BenchmarkJSONLine measures reading a JSON request line with a body of
// 1 MiB of text: one op is one line.
func BenchmarkJSONLine(b *testing.B) {
	line := []byte(`{"url":"http://a.example/x","method":"POST","header":{"Content-Type":"text/plain"},"id":1,"body":"` +
		strings.Repeat("a", 1<<20) + `"}` + "\n")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		s := NewScanner(Source{Name: "in", R: bytes.NewReader(line)}, Shard{}, nil)
		if !s.Scan() || s.Line().Invalid != "" {
			b.Fatal("not read")
		}
	}
}
