package report

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestHostTable feeds streams of attempts with a few heavy hosts and a long
// tail to tables of several sizes and checks space-saving's guarantees
// against exact counts: totals add up, every host above T/max is listed,
// each listed host's true count is within [Attempts, Attempts+Missed], and
// the rest's host count is close to the truth.
func TestHostTable(t *testing.T) {
	for _, tt := range []struct {
		name          string
		max, distinct int
		attempts      int
	}{
		{"fits", 10, 10, 1000},
		{"none listed", 0, 50, 500},
		{"one", 1, 20, 2000},
		{"zipf tail", 100, 20000, 50000},
		{"all distinct", 50, 30000, 30000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.max)))
			zipf := rand.NewZipf(rng, 1.2, 1, uint64(tt.distinct-1))
			tab := NewHostTable(tt.max)
			type count struct{ attempts, ok int }
			truth := map[string]*count{}
			for i := range tt.attempts {
				k := int(zipf.Uint64())
				if tt.name == "all distinct" || i < tt.distinct {
					k = i % tt.distinct // every host at least once
				}
				h := fmt.Sprintf("h%d.example:80", k)
				ok := rng.IntN(4) > 0
				tab.Add(h, ok, 1)
				c := truth[h]
				if c == nil {
					c = &count{}
					truth[h] = c
				}
				c.attempts++
				if ok {
					c.ok++
				}
			}
			hosts, other := tab.Report()
			if len(hosts) > tt.max {
				t.Fatalf("%d hosts listed, max %d", len(hosts), tt.max)
			}
			sumA, sumOK, sumF := 0, 0, 0
			for h, r := range hosts {
				c := truth[h]
				sumA, sumOK, sumF = sumA+r.Attempts, sumOK+r.OK, sumF+r.Failed
				if r.Attempts > c.attempts || c.attempts > r.Attempts+r.Missed {
					t.Errorf("%s: true attempts %d outside [%d, %d+%d]", h, c.attempts, r.Attempts, r.Attempts, r.Missed)
				}
				if tt.max > 0 && r.Missed > tt.attempts/tt.max {
					t.Errorf("%s: missed %d > T/max = %d", h, r.Missed, tt.attempts/tt.max)
				}
			}
			if len(truth) <= tt.max {
				if other != nil {
					t.Errorf("every host fits, but hosts_other = %+v", other)
				}
				for h, r := range hosts {
					if r.Missed != 0 || r.Attempts != truth[h].attempts || r.OK != truth[h].ok {
						t.Errorf("%s: %+v, want exact %+v", h, r, truth[h])
					}
				}
				return
			}
			if other == nil {
				t.Fatal("hosts_other missing")
			}
			sumA, sumOK, sumF = sumA+other.Attempts, sumOK+other.OK, sumF+other.Failed
			wantOK := 0
			for _, c := range truth {
				wantOK += c.ok
			}
			if sumA != tt.attempts || sumOK != wantOK || sumF != tt.attempts-wantOK {
				t.Errorf("attempts %d ok %d failed %d, want %d %d %d", sumA, sumOK, sumF, tt.attempts, wantOK, tt.attempts-wantOK)
			}
			for h, c := range truth {
				if tt.max > 0 && c.attempts > tt.attempts/tt.max && hosts[h] == nil {
					t.Errorf("%s has %d > T/max = %d attempts but is not listed", h, c.attempts, tt.attempts/tt.max)
				}
			}
			wantOther := len(truth) - len(hosts)
			if d := other.Hosts - wantOther; d*d*10000 > 4*wantOther*wantOther { // within 2%
				t.Errorf("hosts_other.hosts = %d, want about %d", other.Hosts, wantOther)
			}
			if len(truth) < 1000 && other.Hosts != wantOther {
				t.Errorf("hosts_other.hosts = %d, want %d exactly (linear counting)", other.Hosts, wantOther)
			}
		})
	}
}

// BenchmarkHostTable measures counting an attempt in a full table of 1000
// hosts with a long tail of others: one op is one attempt.
func BenchmarkHostTable(b *testing.B) {
	hosts := make([]string, 1<<14)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.example:443", i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(len(hosts)-1))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = int(zipf.Uint64())
	}
	tab := NewHostTable(DefaultHosts)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tab.Add(hosts[order[i%len(order)]], true, 1)
		i++
	}
}

// TestHostTableBans: bans add up like attempts: a host's bans go with its
// other counts to the rest when it leaves the list, and a ban of a host
// not listed is counted with the rest.
func TestHostTableBans(t *testing.T) {
	tab := NewHostTable(1)
	tab.Add("a:80", false, 1)
	tab.Ban("a:80")
	tab.Add("b:80", false, 1) // takes a's place: a's ban goes to the rest
	tab.Ban("b:80")
	hosts, other := tab.Report()
	if b := hosts["b:80"]; len(hosts) != 1 || b == nil || b.Banned != 1 || b.Missed != 1 {
		t.Fatalf("hosts %v, want b:80 alone with 1 ban, 1 missed", hosts)
	}
	if other == nil || other.Banned != 1 || other.Attempts != 1 || other.Hosts != 1 {
		t.Fatalf("hosts_other %+v, want a:80's attempt and ban", other)
	}
	tab = NewHostTable(0)
	tab.Add("a:80", false, 1)
	tab.Ban("a:80")
	if _, other := tab.Report(); other == nil || other.Banned != 1 {
		t.Fatalf("no host listed: hosts_other %+v, want the ban", other)
	}
}

// TestTopTableUntracked: the number of keys a table does not track is
// exact while there are no more than exactLimit distinct keys (so none
// when they all fit, one when one more came), bounded by the keys that
// left, and within 2% past that.
func TestTopTableUntracked(t *testing.T) {
	for _, tt := range []struct{ max, keys, want int }{
		{1000, 1, 0}, {1000, 500, 0}, {1000, 1000, 0},
		{911, 912, 1}, {999, 1000, 1}, {10, 4000, 3990},
		{0, 1, 1}, {0, 300, 300}, {1, 2, 1},
		{10, exactLimit, exactLimit - 10}, // the last count kept exactly
	} {
		tab := newTopTable(tt.max, func(*topEntry[struct{}]) {})
		for i := range tt.keys {
			for range 1 + i%3 { // keys of 1 to 3 attempts
				tab.count(fmt.Sprintf("h%d.example:443", i))
			}
		}
		if got := tab.untracked(); got != tt.want {
			t.Errorf("max %d, %d keys: %d untracked, want %d", tt.max, tt.keys, got, tt.want)
		}
	}
	tab := newTopTable(100, func(*topEntry[struct{}]) {})
	const keys = 20000
	for i := range keys {
		tab.count(fmt.Sprintf("h%d.example:443", i))
	}
	if got, want := tab.untracked(), keys-100; got < want*98/100 || got > want*102/100 {
		t.Errorf("%d keys, 100 tracked: %d untracked, want %d within 2%%", keys, got, want)
	}
	// Just past exactLimit keys the count is an estimate, within 2%.
	tab = newTopTable(10, func(*topEntry[struct{}]) {})
	for i := range exactLimit + 1 {
		tab.count(fmt.Sprintf("h%d.example:443", i))
	}
	if got, want := tab.untracked(), exactLimit+1-10; got < want*98/100 || got > want*102/100 {
		t.Errorf("%d keys, 10 tracked: %d untracked, want %d within 2%%", exactLimit+1, got, want)
	}
	// A host table that lists every host has no rest.
	h := NewHostTable(DefaultHosts)
	for i := range 500 {
		h.Add(fmt.Sprintf("h%d.example:443", i), true, 1)
	}
	if _, other := h.Report(); other != nil {
		t.Errorf("500 hosts, 1000 listed: hosts_other %+v, want none", *other)
	}
}
