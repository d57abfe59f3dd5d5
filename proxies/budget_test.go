package proxies_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

func parseList(t *testing.T, list string) []proxies.Proxy {
	t.Helper()
	ps, err := proxies.Parse("f", strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// budget is a budget as Budgets returns it: its name and Spec.
type budget struct {
	Name string
	limits.Spec
}

func TestBudgets(t *testing.T) {
	perSec := func(n float64) limits.Rate { return limits.Rate{N: n, Per: time.Second} }
	defRate := perSec(100)
	tests := []struct {
		name     string
		list     string
		want     []budget
		budgetOf []int
	}{
		{"defaults", "http://a:1\nhttp://b:1\n", []budget{
			{"http://a:1", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
			{"http://b:1", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
		}, []int{0, 1}},
		{"line overrides", "http://a:1 concurrency=9 rate=2/s burst=3\n", []budget{
			{"http://a:1", limits.Spec{Concurrency: 9, Rate: perSec(2), Burst: 3}},
		}, []int{0}},
		{"pool shares one budget, first appearance order", "http://a:1 pool=p\nhttp://b:1\nhttp://c:1 pool=p\nhttp://d:1 pool=q\n", []budget{
			{"p", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
			{"http://b:1", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
			{"q", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
		}, []int{0, 1, 0, 2}},
		{"pool values set on different lines", "http://a:1 pool=p concurrency=8\nhttp://b:1 pool=p rate=5/s\nhttp://c:1 pool=p burst=2\n", []budget{
			{"p", limits.Spec{Concurrency: 8, Rate: perSec(5), Burst: 2}},
		}, []int{0, 0, 0}},
		{"pool values repeated", "http://a:1 pool=p concurrency=8 rate=60/m burst=2\nhttp://b:1 pool=p concurrency=8 rate=1/s burst=2\n", []budget{
			{"p", limits.Spec{Concurrency: 8, Rate: limits.Rate{N: 60, Per: time.Minute}, Burst: 2}},
		}, []int{0, 0}},
		{"pool name may look like an identity", "http://a:1 pool=http://a:1\nhttp://a:1\n", []budget{
			{"http://a:1", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
			{"http://a:1", limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1}},
		}, []int{0, 1}},
		{"empty", "", nil, []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := parseList(t, tt.list)
			specs, names, budgetOf, err := proxies.Budgets(ps, limits.Spec{Concurrency: 4, Rate: defRate, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			var budgets []budget
			for i := range specs {
				budgets = append(budgets, budget{names[i], specs[i]})
			}
			if got, want := fmt.Sprintf("%+v", budgets), fmt.Sprintf("%+v", tt.want); got != want {
				t.Errorf("budgets\n got %s\nwant %s", got, want)
			}
			if got, want := fmt.Sprint(budgetOf), fmt.Sprint(tt.budgetOf); got != want {
				t.Errorf("budgetOf %s, want %s", got, want)
			}
		})
	}
}

func TestBudgetsConflicts(t *testing.T) {
	tests := []struct {
		name string
		list string
		want string // a part of the message
	}{
		{"concurrency", "http://a:1 pool=eu concurrency=4\n# c\nhttp://b:1 pool=eu concurrency=8\n", `pool "eu": concurrency=8 at f:3 conflicts with concurrency=4 at f:1`},
		{"rate", "http://a:1 pool=eu rate=1/s\nhttp://b:1 pool=eu\nhttp://c:1 pool=eu rate=2/s\n", `pool "eu": rate=2/1s at f:3 conflicts with rate=1/1s at f:1`},
		{"burst", "http://a:1 pool=eu burst=1\nhttp://b:1 pool=eu burst=2\n", `pool "eu": burst=2 at f:2 conflicts with burst=1 at f:1`},
		{"explicit value equal to the default still conflicts", "http://a:1 pool=eu concurrency=4\nhttp://b:1 pool=eu concurrency=5\n", "conflicts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := proxies.Budgets(parseList(t, tt.list), limits.Spec{Concurrency: 4, Burst: 1})
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, proxies.ErrPoolConflict) {
				t.Errorf("error %v does not wrap ErrPoolConflict", err)
			}
			if !strings.HasPrefix(err.Error(), "proxies: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}
