package cmd

import (
	"context"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestHelp_flagGroups: fetch --help lists every flag exactly once, each
// under a group of its topic (only --help and --version under "Other
// flags").
func TestHelp_flagGroups(t *testing.T) {
	ios, _, stdout, stderr := Test()
	if code := Run(context.Background(), ios, []string{"--help"}); code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	help := stdout.String()
	for _, g := range append(flagGroupOrder, "Other flags") {
		if !strings.Contains(help, "\n"+g+":\n") {
			t.Errorf("no group %q in the help", g)
		}
	}
	root := NewCmdRoot(ios)
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	n := 0
	root.Flags().VisitAll(func(f *pflag.Flag) {
		n++
		re := regexp.MustCompile(`(?m)^  (-\w, |    )--` + regexp.QuoteMeta(f.Name) + `( |$)`)
		if got := len(re.FindAllString(help, -1)); got != 1 {
			t.Errorf("--%s is listed %d times in the help, want once", f.Name, got)
		}
		group := f.Annotations[groupAnnotation]
		switch {
		case f.Name == "help" || f.Name == "version":
		case len(group) != 1:
			t.Errorf("--%s is in groups %q, want one", f.Name, group)
		case rank(group[0]) >= len(flagGroupOrder):
			t.Errorf("--%s is in the group %q, which the help does not order", f.Name, group[0])
		}
	})
	if n < 30 {
		t.Errorf("only %d flags", n)
	}
}

func TestVersion(t *testing.T) {
	ios, _, stdout, _ := Test()
	if code := Run(context.Background(), ios, []string{"--version"}); code != ExitOK {
		t.Fatalf("exit code %d", code)
	}
	if !regexp.MustCompile(`^fetch \S+ \([^)]+\)\n$`).MatchString(stdout.String()) {
		t.Errorf("--version printed %q, want \"fetch VERSION (REVISION)\"", stdout)
	}

	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"none", nil, "(devel) (unknown revision)"},
		{"go install @version", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "3f86433abc"}, {Key: "vcs.modified", Value: "false"}}}, "v1.2.3 (3f86433abc)"},
		{"a checkout with changes", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "3f86433abc"}, {Key: "vcs.modified", Value: "true"}}}, "(devel) (3f86433abc-dirty)"},
	}
	for _, tt := range tests {
		if got := versionOf(tt.info); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range completionShells {
		t.Run(sh, func(t *testing.T) {
			ios, _, stdout, stderr := Test()
			if code := Run(context.Background(), ios, []string{"completion", sh}); code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stdout.String(), "fetch") || stdout.Len() < 1000 {
				t.Errorf("not a completion script:\n%.300s", stdout)
			}
		})
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		ios, _, stdout, stderr := Test()
		if code := Run(context.Background(), ios, args); code != ExitUsage || stdout.Len() > 0 {
			t.Errorf("%q: exit code %d, stdout %d bytes; want %d and nothing; stderr:\n%s", args, code, stdout.Len(), ExitUsage, stderr)
		}
	}
}
