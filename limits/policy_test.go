package limits_test

import (
	"testing"

	"github.com/fetch-dev/fetch/limits"
)

// TestPolicySet: the flag's names read back through String, and anything
// else is refused, leaving the policy as it was.
func TestPolicySet(t *testing.T) {
	tests := []struct {
		in      string
		want    limits.Policy
		wantErr bool
	}{
		{"least-inflight", limits.LeastInFlight, false}, // the default's name
		{"least-used", limits.LeastUsed, false},         // fewest attempts
		{"round-robin", limits.RoundRobin, false},       // in turn
		{"random", limits.Random, false},                // uniformly
		{"", limits.Random, true},                       // no name is not the default
		{"fastest", limits.Random, true},                // unknown
		{"Least-Used", limits.Random, true},             // names are lower case
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p := limits.Random
			err := p.Set(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Set(%q): err %v, want error %v", tt.in, err, tt.wantErr)
			}
			if p != tt.want {
				t.Errorf("Set(%q) gave %v, want %v", tt.in, p, tt.want)
			}
			if !tt.wantErr && p.String() != tt.in {
				t.Errorf("String() = %q, want %q", p.String(), tt.in)
			}
		})
	}
	if s := limits.Policy(9).String(); s != "Policy(9)" {
		t.Errorf("an unknown policy prints as %q", s)
	}
}
