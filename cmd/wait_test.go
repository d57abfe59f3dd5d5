package cmd

import (
	"testing"
	"time"
)

// pollEvery is how often waitFor looks at what it waits for.
const pollEvery = time.Millisecond

// waitFor waits until cond returns true, looking every pollEvery. If within
// passes first, it calls each of explain (to log what helps to see why: a
// process's stderr) and fails t, naming what it waited for.
//
// It is for states that tell nobody when they change: another process's
// output file growing, a target's requests in flight, a key in Redis.
// Where the code under test can send an event (a channel closed, a write
// to a buffer the test holds, see lockedBuffer.waitFor), wait for that
// instead. cond runs on t's goroutine, so it may end the test itself when
// waiting longer is pointless.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, explain ...func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			for _, f := range explain {
				f()
			}
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(pollEvery) // polling: the state waited for sends no event
	}
}
