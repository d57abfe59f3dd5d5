package fetch

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

	// Body is the start of the final attempt's body, with Config.KeepBody.
	Body []byte `json:"-"`
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
// happened. As JSON its keys come in the order of Phases, the order the work
// passes through them, so that records read left to right.
type PhaseTimes map[string]float64

// MarshalJSON writes the phases in the order of Phases, then any other key
// sorted.
func (p PhaseTimes) MarshalJSON() ([]byte, error) {
	return p.appendJSON(make([]byte, 0, 16*len(p)+2))
}
