package results

import (
	"encoding/json"
	"iter"
	"strconv"
)

// Phase names, in the order work passes through them.
const (
	PhaseInput   = "input"
	PhaseQueue   = "queue"
	PhaseDNS     = "dns"
	PhaseConnect = "connect"
	PhaseProxy   = "proxy"
	PhaseTLS     = "tls"
	PhaseRequest = "request"
	PhaseHeaders = "headers"
	PhaseBody    = "body"
)

// Phases lists every phase in order.
var Phases = []string{PhaseInput, PhaseQueue, PhaseDNS, PhaseConnect, PhaseProxy, PhaseTLS, PhaseRequest, PhaseHeaders, PhaseBody}

// The index of each phase in Phases: PhaseTimes keeps its times by it, and
// the engine's tracker its clocks.
const (
	IndexInput = iota
	IndexQueue
	IndexDNS
	IndexConnect
	IndexProxy
	IndexTLS
	IndexRequest
	IndexHeaders
	IndexBody
	NumPhases
)

// noPhase is PhaseIndex's answer for a name that is not a phase.
const noPhase = -1

// Error kinds.
const (
	KindInvalid   = "invalid"
	KindTimeout   = "timeout"  // a per-phase timeout
	KindDeadline  = "deadline" // the total deadline for the URL
	KindDNS       = "dns"
	KindRefused   = "refused"
	KindReset     = "reset"
	KindTLS       = "tls"
	KindProxy     = "proxy"
	KindStatus    = "status"
	KindTooLarge  = "too_large"
	KindRedirect  = "redirect"
	KindCancelled = "cancelled"
	// KindCoordinator is produced by the shared (Redis) scheduler of
	// distributed mode: Redis unreachable until the URL's deadline (phase
	// queue), or an attempt whose lease was lost. The in-process scheduler
	// never produces it.
	KindCoordinator = "coordinator"
	// KindBanned: the final attempt's response was a ban (--ban-status,
	// --ban-match), phase headers or body.
	KindBanned = "banned"
	// KindSkipped: the URL's host had --host-max-failures attempts in a
	// row fail before any response; no attempt was made (phase queue).
	KindSkipped = "skipped"
	KindOther   = "other"
)

// Record is the one result line written for each URL line taken for work.
// Field order is the order of the JSON output.
type Record struct {
	URL       string     `json:"url"`
	Input     string     `json:"input"`
	Line      int        `json:"line"`
	OK        bool       `json:"ok"`
	Status    int        `json:"status"`
	Proxy     string     `json:"proxy,omitempty"`
	Pool      string     `json:"pool,omitempty"`
	Attempts  int        `json:"attempts"`
	Bytes     int64      `json:"bytes"`
	ElapsedMS float64    `json:"elapsed_ms"`
	Phases    PhaseTimes `json:"phases"`
	Error     *Error     `json:"error"`
	Tries     []Try      `json:"tries"`
	File      string     `json:"file,omitempty"`

	// ID and Meta are a JSON request line's "id" and "meta", copied
	// unchanged (compact JSON), or nil.
	ID   json.RawMessage `json:"id,omitempty"`
	Meta json.RawMessage `json:"meta,omitempty"`

	// Facts of the final response, when known (see Facts).
	Facts

	// ProxyStatus is the proxy's Proxy-Status header (RFC 9209) on the
	// final attempt's answer, when it had one.
	ProxyStatus *ProxyStatus `json:"proxy_status,omitempty"`

	// Body is the start of the final attempt's body, with Config.KeepBody.
	Body []byte `json:"-"`
}

// Facts are what a record tells of the final response beyond its status:
// where the URL ended up, how, over what. Each is omitted when unknown.
type Facts struct {
	FinalURL      string      `json:"final_url,omitempty"`      // after redirects, user information removed
	Redirects     []Redirect  `json:"redirects,omitempty"`      // each hop in order, when there were any
	Proto         string      `json:"proto,omitempty"`          // HTTP/1.1, HTTP/2.0
	RemoteAddr    string      `json:"remote_addr,omitempty"`    // the target's address, or the proxy's when proxied
	ContentType   string      `json:"content_type,omitempty"`   // the header's value
	ContentLength json.Number `json:"content_length,omitempty"` // the header's value, a decimal number
	TLS           *TLS        `json:"tls,omitempty"`            // https targets
	Headers       Headers     `json:"headers,omitempty"`        // --record-headers
	SHA256        string      `json:"sha256,omitempty"`         // --record-hash: hex, of the bytes read
}

// Redirect is one hop of a redirect chain: the status that sent the
// request on, and the URL it was sent to.
type Redirect struct {
	Status int    `json:"status"`
	URL    string `json:"url"`
}

// TLS is what a record tells of an https target's TLS connection.
type TLS struct {
	Version      string `json:"version"`                  // TLS1.2, TLS1.3
	Cipher       string `json:"cipher"`                   // crypto/tls's name of the suite
	ALPN         string `json:"alpn,omitempty"`           // the protocol negotiated
	ServerName   string `json:"server_name,omitempty"`    // the name sent (SNI)
	CertNotAfter string `json:"cert_not_after,omitempty"` // the leaf's expiry, RFC 3339 in UTC
	CertIssuer   string `json:"cert_issuer,omitempty"`    // the leaf's issuer, as pkix.Name.String writes it
}

// Headers are response headers copied into a record: lower-case names,
// each with its values in order. As JSON, names are sorted.
type Headers map[string][]string

// ProxyStatus is a member of a proxy's Proxy-Status header (RFC 9209):
// the intermediary's name, its error parameter and details, when it had
// them. The member is the first with an error (the intermediary nearest
// the origin that failed), else the last (the proxy that answered).
type ProxyStatus struct {
	Proxy   string `json:"proxy"`
	Error   string `json:"error,omitempty"`
	Details string `json:"details,omitempty"`
}

// Try is an earlier attempt of a record.
type Try struct {
	Proxy     string     `json:"proxy,omitempty"`
	Pool      string     `json:"pool,omitempty"`
	Status    int        `json:"status"`
	ElapsedMS float64    `json:"elapsed_ms"`
	Phases    PhaseTimes `json:"phases"`
	Error     *Error     `json:"error"`
}

// Error says where and how an attempt or a record failed.
type Error struct {
	Phase   string `json:"phase"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Phase + ": " + e.Kind + ": " + e.Message }

// PhaseTimes are the milliseconds an attempt spent in each phase that
// happened. The zero value has none. It is a value, not a map, so that an
// attempt's phases cost no allocation. As JSON it is an object of the phases
// that happened, in the order of Phases, so that records read left to
// right; a key that is not a phase is ignored when one is read.
type PhaseTimes struct {
	ms   [NumPhases]float64
	seen [NumPhases]bool
}

// Get returns the milliseconds spent in phase, and whether it happened.
func (p PhaseTimes) Get(phase string) (ms float64, ok bool) {
	i := PhaseIndex(phase)
	if i == noPhase || !p.seen[i] {
		return 0, false
	}
	return p.ms[i], true
}

// Set says that phase happened and took ms milliseconds. It reports false,
// and changes nothing, when phase is not one of Phases.
func (p *PhaseTimes) Set(phase string, ms float64) bool {
	i := PhaseIndex(phase)
	if i == noPhase {
		return false
	}
	p.SetAt(i, ms)
	return true
}

// SetAt says that the phase at index i of Phases happened and took ms
// milliseconds.
func (p *PhaseTimes) SetAt(i int, ms float64) { p.ms[i], p.seen[i] = ms, true }

// At returns the milliseconds spent in the phase at index i of Phases, and
// whether it happened.
func (p *PhaseTimes) At(i int) (float64, bool) { return p.ms[i], p.seen[i] }

// All yields the phases that happened and their milliseconds, in the order
// of Phases.
func (p PhaseTimes) All() iter.Seq2[string, float64] {
	return func(yield func(string, float64) bool) {
		for i, seen := range p.seen {
			if seen && !yield(Phases[i], p.ms[i]) {
				return
			}
		}
	}
}

// MarshalJSON writes the phases that happened in the order of Phases.
func (p PhaseTimes) MarshalJSON() ([]byte, error) {
	return p.appendJSON(make([]byte, 0, 16*NumPhases+2))
}

// String is p as JSON, or an error's text when p holds NaN or an infinity.
func (p PhaseTimes) String() string {
	b, err := p.MarshalJSON()
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// UnmarshalJSON reads an object of phases and milliseconds, as
// MarshalJSON writes it, into p, which it clears first; null leaves p as
// it is. Keys that are not phases are ignored.
func (p *PhaseTimes) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if q, ok := readPhaseTimes(b); ok {
		*p = q
		return nil
	}
	// Any other shape (escapes, values that are not numbers, bad JSON):
	// encoding/json says what it holds, or what is wrong with it.
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*p = PhaseTimes{}
	for k, v := range m {
		p.Set(k, v)
	}
	return nil
}

// readPhaseTimes reads b when it is an object of keys without escapes and
// numbers, as MarshalJSON writes it, without the map encoding/json would
// make: `fetch summarize` reads a record's phases so. ok is false for any
// other b.
func readPhaseTimes(b []byte) (p PhaseTimes, ok bool) {
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	next := func(c byte) bool {
		skip()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	if !next('{') {
		return p, false
	}
	if next('}') {
		skip()
		return p, i == len(b)
	}
	for {
		if !next('"') {
			return p, false
		}
		k := i
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i == len(b) || b[i] != '"' {
			return p, false
		}
		key := b[k:i]
		i++
		if !next(':') {
			return p, false
		}
		skip()
		v := i
		if i < len(b) && b[i] == '+' { // not JSON: left to encoding/json
			return p, false
		}
		for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			i++
		}
		ms, err := strconv.ParseFloat(string(b[v:i]), 64)
		if err != nil {
			return p, false
		}
		if ph := PhaseIndex(string(key)); ph != noPhase {
			p.SetAt(ph, ms)
		}
		if next('}') {
			skip()
			return p, i == len(b)
		}
		if !next(',') {
			return p, false
		}
	}
}
