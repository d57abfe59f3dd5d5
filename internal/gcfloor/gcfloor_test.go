package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

var sink []byte

// collections returns how many collections allocating n bytes in 1 KiB
// pieces took.
func collections(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n / 1024 {
		sink = make([]byte, 1024)
	}
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// collectAndTune runs a collection and tunes f for what it found live, as
// the finalizer after it does. The collections that allocation starts are
// concurrent: on a busy machine their mark can last while the test
// allocates, and what it allocates meanwhile is counted live, so a floor
// tuned after one of them may see tens of MiB live where a few are; and
// the finalizer's sentinel, made during such a mark, outlives the next
// cycle. runtime.GC returns once its cycle is over, with the test's
// goroutine waiting: tune then reads that cycle's live heap.
func collectAndTune(f *Floor) {
	runtime.GC()
	f.tune()
}

// heapGoal is the heap size the runtime means to collect at next.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveMiB returns n MiB for a test to keep live.
func liveMiB(n int) [][]byte {
	live := make([][]byte, n)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	return live
}

// TestFloorCollectsLessOften allocates the same garbage with a small live
// heap, with and without a floor of 32 MiB: with it, there are fewer
// collections; after Stop the percentage is back where it was.
func TestFloorCollectsLessOften(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	runtime.GC()
	const garbage = 256 << 20
	without := collections(garbage)

	f := Start(32 << 20)
	runtime.GC() // the floor is set for what this collection finds live
	with := collections(garbage)
	collectAndTune(f)
	if p := f.Percent(); p <= 100 {
		t.Errorf("percentage %d with a small live heap and a floor of 32 MiB, want more than 100", p)
	}
	f.Stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("percentage %d after Stop, want the base 100", p)
	}
	t.Logf("collections for %d MiB of garbage: %d without the floor, %d with it", garbage>>20, without, with)
	if with*2 > without {
		t.Errorf("%d collections with the floor, %d without: want at most half", with, without)
	}
}

// TestFloorLeavesBigHeaps keeps more than the floor live: the percentage
// stays the base.
func TestFloorLeavesBigHeaps(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	live := liveMiB(64)
	f := Start(8 << 20)
	defer f.Stop()
	collections(64 << 20)
	collectAndTune(f)
	if p := f.Percent(); p != 100 {
		t.Errorf("percentage %d with 64 MiB live and a floor of 8 MiB, want 100", p)
	}
	runtime.KeepAlive(live)
}

// TestPause: no collection runs between Pause and resume, however much is
// allocated; resume puts the floor's percentage back, a second resume does
// nothing, and a forced collection during the pause leaves it paused.
func TestPause(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	f := Start(8 << 20)
	defer f.Stop()
	runtime.GC()
	before := f.Percent()
	resume := f.Pause()
	if n := collections(64 << 20); n != 0 {
		t.Errorf("%d collections during a pause, want 0", n)
	}
	runtime.GC() // its finalizer runs tune, which must not lift the pause
	runtime.GC()
	if n := collections(64 << 20); n != 0 || f.Percent() != -1 {
		t.Errorf("after a forced collection: %d collections, percentage %d; want 0 and -1", n, f.Percent())
	}
	if again := f.Pause(); again == nil {
		t.Fatal("a second Pause returned nil")
	} else {
		again() // a pause within a pause: its resume does not end the first
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("percentage %d after a nested resume, want -1", p)
	}
	resume()
	if p := f.Percent(); p != before {
		t.Errorf("percentage %d after resume, want %d", p, before)
	}
	if n := collections(64 << 20); n == 0 {
		t.Error("no collection after resume")
	}
	debug.SetGCPercent(50) // as if another part had set it...
	resume()               // ...a second resume leaves it
	if p := debug.SetGCPercent(f.Percent()); p != 50 {
		t.Errorf("a second resume set the percentage to %d", p)
	}
	var nilFloor *Floor
	nilFloor.Pause()() // no floor (tests that call cmd.Run): nothing happens
}

// TestFloorOff leaves GOGC=off alone.
func TestFloorOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	f := Start(8 << 20)
	defer f.Stop()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("percentage %d after Start with GOGC=off, want -1", p)
	}
}

// TestPercent: the heap goal of the percentage chosen is live+floor, both
// by GOGC (live·(1+p/100)) and by the runtime's minimum (4 MiB·p/100),
// whichever is larger.
func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, floor uint64
		want        int
	}{
		{live: 3 * mib, floor: 8 * mib, want: 266},   // 800/3; the minimum 10.7 MiB is below 11
		{live: 200 << 10, floor: 8 * mib, want: 204}, // the minimum decides: 4 MiB·2.04 = 8.2 MiB
		{live: 0, floor: 8 * mib, want: 200},
		{live: 16 * mib, floor: 8 * mib, want: 50}, // below the base: the base is kept
	} {
		if got := percent(tc.live, tc.floor); got != tc.want {
			t.Errorf("percent(%d, %d) = %d, want %d", tc.live, tc.floor, got, tc.want)
		}
		p := uint64(percent(tc.live, tc.floor))
		goal := max(tc.live+tc.live*p/100, heapMinimum*p/100)
		if goal > tc.live+tc.floor+mib/8 {
			t.Errorf("live %d, floor %d: percentage %d makes a goal of %d, more than live+floor", tc.live, tc.floor, p, goal)
		}
	}
}

// TestKeepLive: once 64 MiB kept live is declared kept, the heap's goal
// is the live heap plus half the kept bytes (base 100), not plus all of
// them: the runtime's goal after a collection is about 96 MiB, not 128,
// so a collection comes about every 32 MiB of garbage instead of every
// 64. It reads the goal the runtime sets (runtime/metrics), not a count of
// collections, which a busy machine moves: a concurrent collection that
// gets little CPU lets the heap run past its goal while it marks. A small
// kept heap leaves the floor's percentage as it was; a nil floor does
// nothing.
func TestKeepLive(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	live := liveMiB(64)
	f := Start(8 << 20)
	collections(64 << 20)
	collectAndTune(f) // the percentage is set for the 64 MiB live
	if p := f.Percent(); p != 100 {
		t.Fatalf("percentage %d with 64 MiB live, want the base 100", p)
	}
	runtime.GC()
	before := heapGoal()
	f.KeepLive()
	if p := f.Percent(); p < 45 || p > 55 {
		t.Errorf("percentage %d with 64 MiB live and kept, want about 50", p)
	}
	runtime.GC()
	after := heapGoal()
	t.Logf("the heap's goal with 64 MiB live: %d MiB, then kept: %d MiB", before>>20, after>>20)
	// Goals of about 2 and 1.5 times the live heap (and what else the
	// test binary keeps): a ratio of 0.75; at least a tenth apart.
	if r := float64(after) / float64(before); r < 0.65 || r > 0.85 {
		t.Errorf("the heap's goal went from %d to %d bytes once the live heap was kept: ratio %.2f, want about 0.75", before, after, r)
	}
	runtime.KeepAlive(live)
	f.Stop()

	live = nil
	f = Start(8 << 20)
	defer f.Stop()
	collections(64 << 20)
	collectAndTune(f) // what KeepLive reads: a few hundred KiB live
	small := f.Percent()
	f.KeepLive() // a few hundred KiB live: the floor decides
	// The floor's percentage follows the live heap of each collection, and
	// one may run between the two reads (the test binary's other
	// goroutines allocate): what must hold is that the floor still
	// decides, above 100, not the kept heap's base, about 50.
	if p := f.Percent(); p <= 100 {
		t.Errorf("percentage %d after KeepLive of a small heap, want the floor's (%d before it; more than 100)", p, small)
	}
	var nilFloor *Floor
	nilFloor.KeepLive()
}
