package fetch

// Report is the summary of a run, written by --report as one JSON document.
// Jobs, OK, Failed, ByKind and ByPhase count records (a record's final
// error); per proxy and per host, Attempts, OK and Failed count attempts.
// Hosts lists at most Config.ReportHosts hosts, the busiest (see
// HostReport.Missed); HostsOther sums up the others, and is nil when every
// host is listed with exact counts.
type Report struct {
	Jobs        int                     `json:"jobs"`
	OK          int                     `json:"ok"`
	Failed      int                     `json:"failed"`
	ElapsedMS   float64                 `json:"elapsed_ms"`
	ByKind      map[string]int          `json:"by_kind"`
	ByPhase     map[string]int          `json:"by_phase"`
	Proxies     map[string]*ProxyReport `json:"proxies"`
	Hosts       map[string]*HostReport  `json:"hosts"`
	HostsOther  *HostsOther             `json:"hosts_other,omitempty"`
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

// HostReport is one target host:port's part of a Report. When the run had
// more hosts than the report lists, a listed host's counts start when it
// was last admitted to the list: Missed is the most attempts it may have
// had before (counted in HostsOther), so its true attempts lie in
// [Attempts, Attempts+Missed]. Missed is zero (and left out) when the
// counts are exact.
type HostReport struct {
	Attempts    int `json:"attempts"`
	OK          int `json:"ok"`
	Failed      int `json:"failed"`
	MaxInFlight int `json:"max_in_flight"`
	Missed      int `json:"missed,omitempty"`
	Banned      int `json:"banned,omitempty"` // attempts whose response was a ban
}

// HostsOther is the part of a Report for the hosts it does not list, or
// does not count in full: Hosts is how many hosts are not listed (an
// estimate within about 1% past a few thousand, HyperLogLog), and
// Attempts, OK and Failed count the attempts not counted in Report.Hosts.
// Those of Report.Hosts and HostsOther add up to every attempt of the run.
type HostsOther struct {
	Hosts    int `json:"hosts"`
	Attempts int `json:"attempts"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	Banned   int `json:"banned,omitempty"`
}

// Quantiles of a phase's duration in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}
