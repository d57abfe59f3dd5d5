package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag groups of the help, by topic, in the order the help shows them, as
// gh and kubectl group theirs.
const (
	groupIO          = "Inputs and outputs"
	groupProxies     = "Proxies and proxy health"
	groupLimits      = "Limits"
	groupTimeouts    = "Timeouts and retries"
	groupRequests    = "Requests and bodies"
	groupDistributed = "Distributed mode"
)

var flagGroupOrder = []string{groupIO, groupProxies, groupLimits, groupTimeouts, groupRequests, groupDistributed}

// groupAnnotation is the flag annotation that names a flag's group.
const groupAnnotation = "fetch_group"

// flagGrouper puts the flags of a flag set in groups as they are defined:
// every flag defined after begin(G) belongs to G, until the next begin.
// done writes each flag's group in its annotations, which usage reads.
type flagGrouper struct {
	fs     *pflag.FlagSet
	marks  []int // how many flags were defined when each group began
	groups []string
}

func newFlagGrouper(fs *pflag.FlagSet) *flagGrouper { return &flagGrouper{fs: fs} }

func (g *flagGrouper) begin(group string) {
	n := 0
	g.fs.VisitAll(func(*pflag.Flag) { n++ })
	g.marks = append(g.marks, n)
	g.groups = append(g.groups, group)
}

// done annotates each flag with its group. The flag set must keep its
// flags in the order defined (SortFlags false).
func (g *flagGrouper) done() {
	i := 0
	g.fs.VisitAll(func(f *pflag.Flag) {
		k := len(g.marks) - 1
		for k >= 0 && g.marks[k] > i {
			k--
		}
		if k >= 0 {
			g.fs.SetAnnotation(f.Name, groupAnnotation, []string{g.groups[k]})
		}
		i++
	})
}

// groupedFlagUsages renders c's local flags by group, in flagGroupOrder,
// then the flags of no group (--help, --version) under "Other flags" (or
// "Flags" when no flag has a group, as in the subcommands).
func groupedFlagUsages(c *cobra.Command) string {
	sets := map[string]*pflag.FlagSet{}
	var order []string
	add := func(group string, f *pflag.Flag) {
		fs := sets[group]
		if fs == nil {
			fs = pflag.NewFlagSet(group, pflag.ContinueOnError)
			fs.SortFlags = false
			sets[group] = fs
			order = append(order, group)
		}
		fs.AddFlag(f)
	}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		group := ""
		if g := f.Annotations[groupAnnotation]; len(g) == 1 {
			group = g[0]
		}
		add(group, f)
	})
	slices.SortStableFunc(order, func(a, b string) int { return rank(a) - rank(b) })
	var b strings.Builder
	for i, group := range order {
		if i > 0 {
			b.WriteString("\n")
		}
		switch {
		case group != "":
			b.WriteString(group + ":\n")
		case len(order) > 1:
			b.WriteString("Other flags:\n")
		default:
			b.WriteString("Flags:\n")
		}
		b.WriteString(sets[group].FlagUsages())
	}
	return strings.TrimRight(b.String(), " \n")
}

// rank is group's place in the help: the known groups in order, then any
// other, then the flags of no group.
func rank(group string) int {
	if group == "" {
		return len(flagGroupOrder) + 1
	}
	if i := slices.Index(flagGroupOrder, group); i >= 0 {
		return i
	}
	return len(flagGroupOrder)
}

// usage writes c's usage, as cobra's default usage template does, with
// the local flags by group. It is Go, not a template: a program that
// executes a template keeps every exported method of its types, as
// text/template may call any of them by name.
func usage(c *cobra.Command) error {
	// LocalFlags first, as cobra does before its template: it merges the
	// persistent flags of c's parents into c's, which UseLine looks at.
	local, inherited := c.LocalFlags(), c.InheritedFlags()
	var b strings.Builder
	b.WriteString("Usage:")
	if c.Runnable() {
		b.WriteString("\n  " + c.UseLine())
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n  " + c.CommandPath() + " [command]")
	}
	if len(c.Aliases) > 0 {
		b.WriteString("\n\nAliases:\n  " + c.NameAndAliases())
	}
	if c.HasExample() {
		b.WriteString("\n\nExamples:\n" + c.Example)
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n\nAvailable Commands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				fmt.Fprintf(&b, "\n  %-*s %s", sub.NamePadding(), sub.Name(), sub.Short)
			}
		}
	}
	if local.HasAvailableFlags() {
		b.WriteString("\n\n" + groupedFlagUsages(c))
	}
	if inherited.HasAvailableFlags() {
		b.WriteString("\n\nGlobal Flags:\n" + strings.TrimRightFunc(inherited.FlagUsages(), unicode.IsSpace))
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n\nUse \"" + c.CommandPath() + " [command] --help\" for more information about a command.")
	}
	b.WriteString("\n")
	_, err := io.WriteString(c.OutOrStderr(), b.String())
	return err
}
