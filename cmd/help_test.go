package cmd

import (
	"context"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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

// TestUsageAsTheTemplate: usage, in Go, writes for every command what
// cobra's default usage template with the flags by group, which fetch used
// before, writes.
func TestUsageAsTheTemplate(t *testing.T) {
	const template = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

{{groupedFlagUsages .}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
	cobra.AddTemplateFunc("groupedFlagUsages", groupedFlagUsages)
	ios, _, _, _ := Test()
	ours, theirs := NewCmdRoot(ios), NewCmdRoot(ios)
	theirs.SetUsageFunc(nil)
	theirs.SetUsageTemplate(template)
	for _, root := range []*cobra.Command{ours, theirs} {
		root.InitDefaultHelpCmd()
		root.Aliases = []string{"get"} // and an example, neither of which fetch has yet
		root.Example = "  fetch -o out.jsonl urls.txt"
		root.PersistentFlags().Bool("global", false, "a flag the subcommands inherit")
	}
	n := 0
	for i, c := range append([]*cobra.Command{ours}, ours.Commands()...) {
		want := theirs
		if i > 0 {
			want = theirs.Commands()[i-1]
		}
		got, wanted := c.UsageString(), want.UsageString()
		if got != wanted {
			t.Errorf("%s: usage\n%s\nwant, as the template writes it,\n%s", c.CommandPath(), got, wanted)
		}
		if !strings.Contains(got, "Global Flags:") && i > 0 || !strings.HasPrefix(got, "Usage:") {
			t.Errorf("%s: usage without what the test added:\n%s", c.CommandPath(), got)
		}
		n++
	}
	if n < 5 {
		t.Errorf("only %d commands compared", n)
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
