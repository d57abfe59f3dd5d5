package cmd

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fetch-dev/fetch/fetch"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/spf13/pflag"
)

// A policy is read by name and checked once, by its own Set.
var _ pflag.Value = new(limits.Policy)

// sizeValue is a pflag.Value for byte counts read by ParseSize.
type sizeValue struct{ p *int64 }

var _ pflag.Value = sizeValue{}

func (v sizeValue) String() string {
	if v.p == nil {
		return ""
	}
	return FormatSize(*v.p)
}
func (v sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}
func (sizeValue) Type() string { return "SIZE" }

// rateValue is a pflag.Value for rates read by limits.ParseRate.
type rateValue struct{ p *limits.Rate }

var _ pflag.Value = rateValue{}

func (v rateValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}
func (v rateValue) Set(s string) error {
	r, err := limits.ParseRate(s)
	if err != nil {
		return err
	}
	*v.p = r
	return nil
}
func (rateValue) Type() string { return "RATE" }

// statusListValue is a pflag.Value for a comma-separated list of HTTP
// statuses. The empty string is the empty list: no status is retried.
type statusListValue struct{ p *[]int }

var _ pflag.Value = statusListValue{}

func (v statusListValue) String() string {
	if v.p == nil {
		return ""
	}
	s := make([]string, len(*v.p))
	for i, n := range *v.p {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
func (v statusListValue) Set(s string) error {
	list, err := parseStatusList(s)
	if err != nil {
		return err
	}
	*v.p = list
	return nil
}
func (statusListValue) Type() string { return "LIST" }

// parseStatusList parses "429,502,503" into statuses 100-599, dropping
// repeats.
func parseStatusList(s string) ([]int, error) {
	list := []int{}
	if strings.TrimSpace(s) == "" {
		return list, nil
	}
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 100 || n > 599 {
			return nil, fmt.Errorf("bad status %q: want a comma-separated list of statuses 100-599", f)
		}
		if !seen[n] {
			seen[n] = true
			list = append(list, n)
		}
	}
	return list, nil
}

// parseHeaders parses -H values "Name: value" into a header. A name given
// more than once gets every value, in order.
func parseHeaders(lines []string) (http.Header, error) {
	h := http.Header{}
	for _, line := range lines {
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || !isToken(name) {
			return nil, fmt.Errorf("bad header %q: want \"Name: value\"", line)
		}
		value = strings.TrimSpace(value)
		if strings.ContainsAny(value, "\r\n\x00") {
			return nil, fmt.Errorf("bad header %q: value has a line break", name)
		}
		h.Add(name, value)
	}
	return h, nil
}

// isToken reports whether s is a non-empty RFC 9110 token, as header names
// and methods must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// rotationValue is a pflag.Value for --proxy-rotate: never or request.
type rotationValue struct{ p *proxies.Rotation }

var _ pflag.Value = rotationValue{}

func (v rotationValue) String() string {
	if v.p == nil || *v.p == proxies.RotateDefault {
		return proxies.RotateNever.String()
	}
	return v.p.String()
}
func (v rotationValue) Set(s string) error {
	r, err := proxies.ParseRotation(s)
	if err != nil {
		return err
	}
	*v.p = r
	return nil
}
func (rotationValue) Type() string { return "WHEN" }

// transportValue is a pflag.Value for --transport: fast or std.
type transportValue struct{ p *fetch.Transport }

var _ pflag.Value = transportValue{}

func (v transportValue) String() string {
	if v.p == nil {
		return fetch.TransportFast.String()
	}
	return v.p.String()
}
func (v transportValue) Set(s string) error {
	t, err := fetch.ParseTransport(s)
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}
func (transportValue) Type() string { return "T" }

// regexpValue is a pflag.Value for a regular expression (RE2 syntax, as
// Go's regexp takes it); empty is none.
type regexpValue struct{ p **regexp.Regexp }

var _ pflag.Value = regexpValue{}

func (v regexpValue) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return (*v.p).String()
}
func (v regexpValue) Set(s string) error {
	if s == "" {
		*v.p = nil
		return nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return fmt.Errorf("bad regular expression: %w", err)
	}
	*v.p = re
	return nil
}
func (regexpValue) Type() string { return "REGEX" }

// recordHeadersValue is a pflag.Value for --record-headers: a comma list
// of header names, kept lower-case and once each, or all.
type recordHeadersValue struct {
	names *[]string
	all   *bool
}

var _ pflag.Value = recordHeadersValue{}

func (v recordHeadersValue) String() string {
	if *v.all {
		return "all"
	}
	return strings.Join(*v.names, ",")
}

func (v recordHeadersValue) Set(s string) error {
	if strings.TrimSpace(s) == "all" {
		*v.names, *v.all = nil, true
		return nil
	}
	var names []string
	for _, f := range strings.Split(s, ",") {
		name := strings.ToLower(strings.TrimSpace(f))
		if !isToken(name) {
			return fmt.Errorf("bad header name %q: want a comma list of names, or all", f)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	*v.names, *v.all = names, false
	return nil
}

func (recordHeadersValue) Type() string { return "L" }
