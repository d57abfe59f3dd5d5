// Package sfv parses a Structured Field list (RFC 8941 section 3.1) of
// items with parameters, as Proxy-Status (RFC 9209) is: its one job. It
// parses as RFC 8941 section 4.2 says, so that a field that does not
// parse is refused whole. Inner lists, and RFC 9651's dates and display
// strings, fail the parse: RFC 9209 has no use for them.
package sfv

import "strings"

// Type is the type of a bare item.
type Type uint8

// The types of RFC 8941 section 3.3.
const (
	Integer Type = iota + 1 // N
	Decimal                 // N, in thousandths
	String                  // S
	Token                   // S
	Bytes                   // S: base64 as sent
	Boolean                 // N: 0 or 1
)

// Item is a bare item. S is a string's or token's value, or a byte
// sequence's base64 as sent; N an integer, a decimal in thousandths, or a
// boolean's 0 or 1.
type Item struct {
	Type Type
	S    string
	N    int64
}

// Param is one parameter of a member.
type Param struct {
	Key   string
	Value Item
}

// Member is a member of a list: an item and its parameters, in order.
type Member struct {
	Value  Item
	Params []Param
}

// Param returns the value of the parameter key, or nil.
func (m *Member) Param(key string) *Item {
	for i := range m.Params {
		if m.Params[i].Key == key {
			return &m.Params[i].Value
		}
	}
	return nil
}

// ParseList parses s as a list of items with parameters; ok is false
// when it does not parse.
func ParseList(s string) (members []Member, ok bool) {
	p := parser{s: s}
	p.skip(" ")
	for p.more() {
		var m Member
		if m.Value, ok = p.bareItem(); !ok {
			return nil, false
		}
		if m.Params, ok = p.params(); !ok {
			return nil, false
		}
		members = append(members, m)
		p.skip(" \t")
		if !p.more() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skip(" \t")
		if !p.more() {
			return nil, false // a trailing comma
		}
	}
	return members, true
}

// parser reads s from i.
type parser struct {
	s string
	i int
}

func (p *parser) more() bool { return p.i < len(p.s) }

// skip passes any of the bytes in set.
func (p *parser) skip(set string) {
	for p.more() && strings.IndexByte(set, p.s[p.i]) >= 0 {
		p.i++
	}
}

// params parses the parameters after an item. A key given twice keeps its
// first place and its last value.
func (p *parser) params() ([]Param, bool) {
	var ps []Param
	for p.more() && p.s[p.i] == ';' {
		p.i++
		p.skip(" ")
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		v := Item{Type: Boolean, N: 1}
		if p.more() && p.s[p.i] == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		dup := false
		for j := range ps {
			if ps[j].Key == key {
				ps[j].Value, dup = v, true
			}
		}
		if !dup {
			ps = append(ps, Param{key, v})
		}
	}
	return ps, true
}

// key parses a key: lcalpha or "*", then lcalpha, DIGIT, "_", "-", "." or
// "*".
func (p *parser) key() (string, bool) {
	start := p.i
	if !p.more() || !(isLower(p.s[p.i]) || p.s[p.i] == '*') {
		return "", false
	}
	for p.i++; p.more(); p.i++ {
		c := p.s[p.i]
		if !isLower(c) && !isDigit(c) && strings.IndexByte("_-.*", c) < 0 {
			break
		}
	}
	return p.s[start:p.i], true
}

// bareItem parses a bare item.
func (p *parser) bareItem() (Item, bool) {
	if !p.more() {
		return Item{}, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), true
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return Item{Type: Boolean, N: int64(p.s[p.i-1] - '0')}, true
		}
	}
	return Item{}, false
}

// number parses an integer (at most 15 digits) or a decimal (at most 12
// digits, a point and 1 to 3 digits).
func (p *parser) number() (Item, bool) {
	neg := p.s[p.i] == '-'
	if neg {
		p.i++
	}
	var whole, frac int64
	digits, fracDigits, point := 0, 0, false
	for ; p.more(); p.i++ {
		c := p.s[p.i]
		if c == '.' && !point && digits > 0 {
			if digits > 12 {
				return Item{}, false
			}
			point = true
			continue
		}
		if !isDigit(c) {
			break
		}
		if point {
			frac = frac*10 + int64(c-'0')
			fracDigits++
		} else {
			whole = whole*10 + int64(c-'0')
			digits++
		}
		if digits > 15 || fracDigits > 3 {
			return Item{}, false
		}
	}
	if digits == 0 || (point && fracDigits == 0) {
		return Item{}, false
	}
	it := Item{Type: Integer, N: whole}
	if point {
		for range 3 - fracDigits {
			frac *= 10
		}
		it = Item{Type: Decimal, N: whole*1000 + frac}
	}
	if neg {
		it.N = -it.N
	}
	return it, true
}

// str parses a string: printable ASCII between quotes, with \" and \\.
func (p *parser) str() (Item, bool) {
	var b strings.Builder
	for p.i++; p.more(); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i++
			if !p.more() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return Item{}, false
			}
			b.WriteByte(p.s[p.i])
		case c == '"':
			p.i++
			return Item{Type: String, S: b.String()}, true
		case c < 0x20 || c > 0x7e:
			return Item{}, false
		default:
			b.WriteByte(c)
		}
	}
	return Item{}, false // no closing quote
}

// token parses a token: ALPHA or "*", then tchar, ":" or "/".
func (p *parser) token() Item {
	start := p.i
	for p.i++; p.more() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
	}
	return Item{Type: Token, S: p.s[start:p.i]}
}

// bytes parses a byte sequence: base64 between colons, kept as sent.
func (p *parser) bytes() (Item, bool) {
	start := p.i + 1
	for p.i++; p.more(); p.i++ {
		c := p.s[p.i]
		if c == ':' {
			p.i++
			return Item{Type: Bytes, S: p.s[start : p.i-1]}, true
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return Item{}, false
		}
	}
	return Item{}, false
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isTchar reports whether c is a tchar of RFC 9110 section 5.6.2.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
