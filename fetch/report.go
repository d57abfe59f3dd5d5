package fetch

// Report is the summary of a run, written by --report as one JSON document.
// Jobs, OK, Failed, ByKind and ByPhase count records (a record's final
// error); per proxy and per host, Attempts, OK and Failed count attempts.
type Report struct {
	Jobs        int                     `json:"jobs"`
	OK          int                     `json:"ok"`
	Failed      int                     `json:"failed"`
	ElapsedMS   float64                 `json:"elapsed_ms"`
	ByKind      map[string]int          `json:"by_kind"`
	ByPhase     map[string]int          `json:"by_phase"`
	Proxies     map[string]*ProxyReport `json:"proxies"`
	Hosts       map[string]*HostReport  `json:"hosts"`
	Interrupted bool                    `json:"interrupted,omitempty"`
	// Stopped, when set, says why the run stopped before its input ran out
	// other than by an interrupt: "output could not be written".
	Stopped string `json:"stopped,omitempty"`
}

// ProxyReport is one proxy's part of a Report.
type ProxyReport struct {
	Pool        string               `json:"pool,omitempty"`
	Attempts    int                  `json:"attempts"`
	OK          int                  `json:"ok"`
	Failed      int                  `json:"failed"`
	MaxInFlight int                  `json:"max_in_flight"`
	Banned      int                  `json:"banned,omitempty"` // attempts whose response was a ban
	PhasesMS    map[string]Quantiles `json:"phases_ms"`
	State       string               `json:"state,omitempty"`  // the last health state, when it ever changed
	Health      []StateChange        `json:"health,omitempty"` // state changes, in order
}

// StateChange is a proxy's change of health state, at AtMS after the run
// started. CooldownMS is how long a benched proxy sits out.
type StateChange struct {
	AtMS       float64 `json:"at_ms"`
	State      string  `json:"state"`
	CooldownMS float64 `json:"cooldown_ms,omitempty"`
}

// HostReport is one target host:port's part of a Report.
type HostReport struct {
	Attempts    int `json:"attempts"`
	OK          int `json:"ok"`
	Failed      int `json:"failed"`
	MaxInFlight int `json:"max_in_flight"`
	Banned      int `json:"banned,omitempty"` // attempts whose response was a ban
}

// Quantiles of a phase's duration in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}
