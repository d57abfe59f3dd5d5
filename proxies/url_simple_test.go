package proxies

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/fetch-dev/fetch/internal/arena"
)

// TestParseSimple: the fast path takes the forms lists write nearly every
// proxy in, gives what the general path gives for them, and leaves every
// other form to the general path.
func TestParseSimple(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		simple bool // parseSimple takes it
	}{
		{"http://127.0.0.1:3128", true},
		{"http://user-session-7:pw@127.0.0.1:8080", true},
		{"http://user-session-7:pw@127.0.0.1:8080/", true},
		{"https://u.s_e~r:P.a-S_s~9@gate.example.com:7000", true},
		{"socks5://user@10.1.2.3:1080", true},
		{"socks5h://user:@proxy-1.example:1080", true},
		{"http://1.2.3.04:80", true}, // not an address: a name, as the general path has it
		{"http://p.example", false},  // no port: the default is filled in
		{"http://p.example:0080", false},
		{"http://P.example:80", false},
		{"HTTP://p.example:80", false},
		{"http://user%40x:pw@p.example:80", false},
		{"http://user:p:w@p.example:80", false},
		{"http://:pw@p.example:80", false},
		{"http://@p.example:80", false},
		{"http://[::1]:80", false},
		{"http://p.example:80/x", false},
		{"http://p.example:80//", false},
		{"http://p.example:80?x", false},
		{"http://a@b@p.example:80", false},
		{"http://-p.example:80", false},
		{"http://p..example:80", false},
		{"http://p.example:65536", false},
		{"ftp://p.example:21", false},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			var a urlAlloc
			for _, alloc := range []*urlAlloc{nil, &a} {
				u, ok := parseSimple(tc.raw, alloc)
				if ok != tc.simple {
					t.Fatalf("parseSimple(%q) took it: %v, want %v", tc.raw, ok, tc.simple)
				}
				if !ok {
					continue
				}
				want, err := parseGeneral(tc.raw, nil)
				if err != nil {
					t.Fatalf("parseGeneral(%q): %v, parseSimple took it", tc.raw, err)
				}
				if !reflect.DeepEqual(u, want) {
					t.Fatalf("parseSimple(%q) = %#v, parseGeneral %#v", tc.raw, u, want)
				}
			}
		})
	}
}

// TestParseSimpleAllocations: the fast path with blocks, as parse gives it,
// allocates nothing of its own for a proxy.
func TestParseSimpleAllocations(t *testing.T) {
	var a urlAlloc
	a.keep = new(arena.Strings)
	a.users.New() // the first blocks
	a.keep.String("user-session-7")
	n := testing.AllocsPerRun(100, func() {
		if _, ok := parseSimple("http://user-session-7:pw@127.0.0.1:8080", &a); !ok {
			t.Fatal("not taken")
		}
	})
	if n > 0.02 { // a new block of each every 256 URLs
		t.Fatalf("%v allocations a URL", n)
	}
}

// FuzzParseSimple: whatever parseSimple takes, parseGeneral takes too and
// parses to the same URL.
func FuzzParseSimple(f *testing.F) {
	for _, s := range []string{
		"http://user-session-7:pw@127.0.0.1:8080", "socks5h://u@p.example:1", "https://a:b@1.2.3.04:443/",
		"http://u:@p.example:65535", "http://P.example:80", "http://p.example:080", "socks5://x@-a:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, ok := parseSimple(strings.TrimSpace(raw), nil)
		if !ok {
			return
		}
		want, err := parseGeneral(strings.TrimSpace(raw), nil)
		if err != nil {
			t.Fatalf("parseSimple(%q) = %q; parseGeneral refuses it: %v", raw, u.Redacted(), err)
		}
		if !reflect.DeepEqual(u, want) {
			t.Fatalf("parseSimple(%q) = %#v, parseGeneral %#v", raw, u, want)
		}
	})
}

// TestKeptApartFromLines: what a run keeps of a proxy read from a list
// (its identity, host, user name and password) is not a piece of its
// line, so that the list's lines can be collected once the list is
// dropped; a line of one URL that parseSimple takes is not copied at all,
// and its proxy's strings are not pieces of the buffer it was read into
// (which later lines overwrite: the URL and identity checked last would
// not be the line's). Every other line here has a field after its URL,
// and is copied: its pool name, the last byte of the copy, tells where the
// copy is, which the test checks before it looks there.
func TestKeptApartFromLines(t *testing.T) {
	var sb strings.Builder
	line := func(i int) string {
		l := fmt.Sprintf("http://user-session-%d:pw-%d@127.0.0.%d:8080", i, i, 1+i%3)
		if i%2 == 1 {
			l += " pool=p"
		}
		return l
	}
	const n = 3000 // several 64 KiB blocks of lines, and many reads of the buffer
	for i := range n {
		sb.WriteString(line(i) + "\n")
	}
	ps, err := parse("list.txt", strings.NewReader(sb.String()), maxProxies, 0)
	if err != nil || len(ps) != n {
		t.Fatalf("%d proxies, %v", len(ps), err)
	}
	for i, p := range ps {
		if want := strings.Fields(line(i))[0]; p.URL().String() != want {
			t.Fatalf("proxy %d: URL %s, want %s", i, p.URL(), want)
		}
		if want := Identity(p.URL()); p.ID != want || p.Source() != fmt.Sprintf("list.txt:%d", i+1) {
			t.Fatalf("proxy %d: identity %s, source %s; want %s, list.txt:%d", i, p.ID, p.Source(), want, i+1)
		}
		if i%2 == 0 {
			continue
		}
		l := line(i)
		if p.Pool != "p" || !strings.HasSuffix(l, " pool=p") {
			t.Fatalf("proxy %d: pool %q of line %q: the copy's last byte is not its pool name", i, p.Pool, l)
		}
		start := unsafe.Add(unsafe.Pointer(unsafe.StringData(p.Pool)), 1-len(l))
		if got := unsafe.String((*byte)(start), len(l)); got != l {
			t.Fatalf("proxy %d: the %d bytes up to its pool name are %q, not its line", i, len(l), got)
		}
		end := uintptr(start) + uintptr(len(l))
		pass, _ := p.User.Password()
		for what, s := range map[string]string{"identity": p.ID, "host": p.Host, "user name": p.User.Username(), "password": pass} {
			at := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			if at >= uintptr(start) && at < end {
				t.Fatalf("proxy %d: its %s %q is a piece of its line", i, what, s)
			}
		}
	}
}
