package fetch_test

import (
	"time"
)

// pollUntil calls cond every 5 ms until it holds or within has passed,
// and says whether it held. It is for state that tells of no change: the
// goroutines' stacks, what the runtime has collected. Wherever a channel
// or a hook can tell of the change, wait on that instead.
func pollUntil(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}
