package fetch

import (
	"github.com/fetch-dev/fetch/fetch/proxystatus"
	"github.com/fetch-dev/fetch/fetch/results"
)

// heard puts what a proxy said in its answer (answered: its status line,
// "502 Bad Gateway") into res: the Proxy-Status member for the record, and
// when fetch knows what its error means, the attempt's error, as the
// target's failure or the proxy's. It reports whether it set the error.
// An error res already has other than the proxy's refusal (a deadline
// that ran out with the answer) is kept.
func (e *Engine) heard(res *result, says *proxystatus.Says, answered string) bool {
	if ps := says.Status; ps != nil {
		res.proxyStatus = proxystatus.Fit(ps, e.redactor.String, boundMessage)
	}
	if !says.Known() || (res.err != nil && res.err.Kind != results.KindProxy) {
		return false
	}
	m := says.Meaning
	msg := "proxy answered " + answered + ": " + says.What
	if ps := says.Status; ps != nil && ps.Details != "" && says.What == ps.Error {
		msg += " (" + ps.Details + ")"
	}
	res.err = e.newError(m.Phase, m.Kind, msg)
	res.said = m.Side
	res.targetSide = m.Side == proxystatus.Unreached || m.Side == proxystatus.Target
	return true
}
