package report

// DefaultProxies is how many proxies a report lists by default
// (--report-proxies): the busiest ones. The others are summed up in
// Report.ProxiesOther.
const DefaultProxies = 1000

// Report is the summary of a run, written by --report as one JSON document.
// Jobs, OK, Failed, ByKind and ByPhase count records (a record's final
// error); per proxy and per host, Attempts, OK and Failed count attempts.
// Hosts lists at most fetch.Config.ReportHosts hosts, the busiest (see
// Host.Missed); HostsOther sums up the others, and is nil when every
// host is listed with exact counts.
type Report struct {
	Jobs         int               `json:"jobs"`
	OK           int               `json:"ok"`
	Failed       int               `json:"failed"`
	ElapsedMS    float64           `json:"elapsed_ms"`
	ByKind       map[string]int    `json:"by_kind"`
	ByPhase      map[string]int    `json:"by_phase"`
	Proxies      map[string]*Proxy `json:"proxies"`
	ProxiesOther *ProxiesOther     `json:"proxies_other,omitempty"`
	Hosts        map[string]*Host  `json:"hosts"`
	HostsOther   *HostsOther       `json:"hosts_other,omitempty"`
	Interrupted  bool              `json:"interrupted,omitempty"`
	// Stopped, when set, says why the run stopped before its input ran out
	// other than by an interrupt: "output could not be written".
	Stopped string `json:"stopped,omitempty"`
}

// Proxy is one proxy's part of a Report. In a run's report its
// counts are exact. In one rebuilt from records (Summarize) of more proxies
// than it lists, a listed proxy's counts start when it was last admitted to
// the list, as a Host's do: its true attempts lie in [Attempts,
// Attempts+Missed], and its phases are those of the attempts counted.
type Proxy struct {
	Pool        string               `json:"pool,omitempty"`
	Attempts    int                  `json:"attempts"`
	OK          int                  `json:"ok"`
	Failed      int                  `json:"failed"`
	MaxInFlight int                  `json:"max_in_flight"`
	Missed      int                  `json:"missed,omitempty"`
	Banned      int                  `json:"banned,omitempty"` // attempts whose response was a ban
	PhasesMS    map[string]Quantiles `json:"phases_ms"`
	State       string               `json:"state,omitempty"`  // the last health state, when it ever changed
	Health      []StateChange        `json:"health,omitempty"` // state changes, in order: the first ones
	// HealthDropped counts the state changes left out of Health: past
	// the first 1,000 of the proxy, or the first 100,000 of the run.
	HealthDropped int `json:"health_dropped,omitempty"`
}

// ProxiesOther is the part of a Report for the proxies it does not list,
// or does not count in full: Proxies is how many are not listed (in a
// report rebuilt from records, an estimate within about 1% past 4,096
// proxies), and its counts are those of the attempts not counted in
// Report.Proxies. Those of Report.Proxies and ProxiesOther add up to every
// attempt of the run. Pools breaks the same counts down by pool, for the
// attempts of proxies that belong to one; it is left out (PoolsDropped)
// when more than maxOtherPools pools would be in it. States
// counts those proxies whose health state ever changed by their last
// state, as Proxy.State says it.
type ProxiesOther struct {
	Proxies int `json:"proxies"`
	Counts
	Pools  map[string]*Counts `json:"pools,omitempty"`
	States map[string]int     `json:"states,omitempty"`

	// PoolsDropped says that Pools was left out: the proxies not listed
	// belong to more than maxOtherPools pools.
	PoolsDropped bool `json:"pools_dropped,omitempty"`
}

// Counts counts attempts: all of them, the ok and the failed ones, and the
// failed ones whose response was a ban.
type Counts struct {
	Attempts int `json:"attempts"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	Banned   int `json:"banned,omitempty"`
}

// maxOtherPools is the most pools ProxiesOther breaks its counts down by:
// the report stays bounded whatever the list's pool= names, and a pool of
// its own for each of 100,000 proxies is no breakdown. It is not
// --report-proxies, so that --report-proxies 0 (every proxy summed up)
// still tells a few pools apart.
const maxOtherPools = 1000

// add adds r's counts, of a proxy that is not listed, to o's, and to its
// pool's unless that would make Pools longer than maxOtherPools, and its
// last health state to States.
func (o *ProxiesOther) add(r *Proxy) {
	o.Counts.add(r.Attempts, r.OK, r.Failed, r.Banned)
	if r.State != "" {
		if o.States == nil {
			o.States = map[string]int{}
		}
		o.States[r.State]++
	}
	if r.Pool == "" || o.PoolsDropped {
		return
	}
	c := o.Pools[r.Pool]
	if c == nil {
		if len(o.Pools) >= maxOtherPools {
			o.Pools, o.PoolsDropped = nil, true
			return
		}
		if o.Pools == nil {
			o.Pools = map[string]*Counts{}
		}
		c = &Counts{}
		o.Pools[r.Pool] = c
	}
	c.add(r.Attempts, r.OK, r.Failed, r.Banned)
}

// count counts one attempt.
func (c *Counts) count(ok bool) {
	if ok {
		c.add(1, 1, 0, 0)
	} else {
		c.add(1, 0, 1, 0)
	}
}

func (c *Counts) add(attempts, ok, failed, banned int) {
	c.Attempts += attempts
	c.OK += ok
	c.Failed += failed
	c.Banned += banned
}

// StateChange is a proxy's change of health state, at AtMS after the run
// started. CooldownMS is how long a benched proxy sits out.
type StateChange struct {
	AtMS       float64 `json:"at_ms"`
	State      string  `json:"state"`
	CooldownMS float64 `json:"cooldown_ms,omitempty"`
}

// Host is one target host:port's part of a Report. When the run had
// more hosts than the report lists, a listed host's counts start when it
// was last admitted to the list: Missed is the most attempts it may have
// had before (counted in HostsOther), so its true attempts lie in
// [Attempts, Attempts+Missed]. Missed is zero (and left out) when the
// counts are exact.
type Host struct {
	Attempts    int `json:"attempts"`
	OK          int `json:"ok"`
	Failed      int `json:"failed"`
	MaxInFlight int `json:"max_in_flight"`
	Missed      int `json:"missed,omitempty"`
	Banned      int `json:"banned,omitempty"` // attempts whose response was a ban
}

// HostsOther is the part of a Report for the hosts it does not list, or
// does not count in full: Hosts is how many hosts are not listed (an
// estimate within about 1% past 4,096 hosts, HyperLogLog), and
// Attempts, OK and Failed count the attempts not counted in Report.Hosts.
// Those of Report.Hosts and HostsOther add up to every attempt of the run.
type HostsOther struct {
	Hosts int `json:"hosts"`
	Counts
}

// Quantiles of a phase's duration in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}
