package sfv

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestParseList: each type of bare item, parameters (a bare key is true,
// a key given twice keeps its first place and its last value), and the
// lists that do not parse.
func TestParseList(t *testing.T) {
	tok := func(s string) Item { return Item{Type: Token, S: s} }
	for _, tc := range []struct {
		in   string
		want []Member // nil with ok false: does not parse
		ok   bool
	}{
		{"gw", []Member{{Value: tok("gw")}}, true},
		{`"a \"b\" \\", 42, -1.5, :AAE=:, ?0, *t/k:1`, []Member{
			{Value: Item{Type: String, S: `a "b" \`}}, {Value: Item{Type: Integer, N: 42}}, {Value: Item{Type: Decimal, N: -1500}},
			{Value: Item{Type: Bytes, S: "AAE="}}, {Value: Item{Type: Boolean, N: 0}}, {Value: tok("*t/k:1")},
		}, true},
		{"gw;a;b=1;a=x", []Member{{Value: tok("gw"), Params: []Param{
			{"a", tok("x")}, {"b", Item{Type: Integer, N: 1}},
		}}}, true},
		{"", nil, true},
		{"gw,", nil, false},
		{"(a b)", nil, false},
		{`gw; details="x`, nil, false},
		{"gw; details=\"a\x01\"", nil, false},
		{"gw; Error=x", nil, false},
		{"1234567890123456", nil, false},
		{"1.2345", nil, false},
		{"<html>", nil, false},
	} {
		got, ok := ParseList(tc.in)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseList: whatever a field holds, parsing never panics, and a
// field that parses is parsed the same once written back out.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{
		`gw; error=dns_timeout; details="no \"answer\""`,
		`a;x=1;y=-1.5;z=?0;w=:AAE=:;v=*tok/en:1, "b c";error=connection_refused`,
		"origin, gw", "", "(a b)", `gw; details="x`, "gw,", "-999999999999999, 999999999999.999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		members, ok := ParseList(s)
		if !ok {
			return
		}
		out := formatList(members)
		again, ok := ParseList(out)
		if !ok {
			t.Fatalf("%q parsed, but not as written back out: %q", s, out)
		}
		if !reflect.DeepEqual(members, again) {
			t.Fatalf("%q: %+v; written %q: %+v", s, members, out, again)
		}
	})
}

// formatList writes members as a Structured Field list (RFC 8941
// section 4.1).
func formatList(members []Member) string {
	var b strings.Builder
	for i, m := range members {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(formatItem(m.Value))
		for _, p := range m.Params {
			b.WriteString(";" + p.Key)
			if p.Value.Type != Boolean || p.Value.N != 1 {
				b.WriteString("=" + formatItem(p.Value))
			}
		}
	}
	return b.String()
}

func formatItem(it Item) string {
	switch it.Type {
	case Integer:
		return strconv.FormatInt(it.N, 10)
	case Decimal:
		n, sign := it.N, ""
		if n < 0 {
			n, sign = -n, "-"
		}
		frac := strings.TrimRight(strconv.FormatInt(1000+n%1000, 10)[1:], "0")
		if frac == "" {
			frac = "0"
		}
		return sign + strconv.FormatInt(n/1000, 10) + "." + frac
	case String:
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(it.S) + `"`
	case Token:
		return it.S
	case Bytes:
		return ":" + it.S + ":"
	case Boolean:
		return "?" + strconv.FormatInt(it.N, 10)
	}
	panic("unknown type")
}
