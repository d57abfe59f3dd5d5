package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/spf13/cobra"
)

// SummarizeOptions is what fetch summarize was asked to do.
type SummarizeOptions struct {
	IO *IOStreams

	Files         []string // results files, JSON lines
	Report        string   // "" for none
	ReportHosts   int      // hosts listed in the report: the busiest
	ReportProxies int      // proxies listed in the report: the busiest
}

// NewCmdSummarize returns the summarize command. runF replaces the run
// function in tests; nil runs summarizeRun.
func NewCmdSummarize(ios *IOStreams, runF func(*SummarizeOptions) error) *cobra.Command {
	opts := &SummarizeOptions{IO: ios, ReportHosts: report.DefaultHosts, ReportProxies: report.DefaultProxies}
	cmd := &cobra.Command{
		Use:   "summarize [--report FILE] RESULTS_FILE...",
		Short: "Print the summary (and write the report) of results files",
		Long: `summarize prints the summary table of one or more results files of fetch and,
with --report, writes the report. Each (input, line, URL) counts once, by its
final record: the last one that is not cancelled, else the last. So the runs
of a list stopped and resumed, and the shards of a distributed run, add up to
one run. It exits 0 when every line counted is ok, 1 otherwise.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("summarize: give at least one results file")
			}
			return nil
		},
		DisableFlagsInUseLine: true,
		SilenceUsage:          true,
		SilenceErrors:         true,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Files = args
			if err := checkCounts(reportCounts(opts.ReportHosts, opts.ReportProxies)); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return summarizeRun(cmd.Context(), opts)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.Flags().StringVar(&opts.Report, "report", "", "write the report, one JSON document, to `FILE`")
	reportFlags(cmd.Flags(), &opts.ReportHosts, &opts.ReportProxies)
	return cmd
}

// summarizeRun reads the results files twice (see fetch.Summarize), then
// prints the summary on standard output and writes the report.
func summarizeRun(ctx context.Context, opts *SummarizeOptions) (err error) {
	ios := opts.IO
	var ins []namedFile
	for _, name := range opts.Files {
		if name == "-" {
			return usageErrorf("summarize: standard input cannot be summarized, as the files are read twice; save it to a file first")
		}
		ins = append(ins, namedFile{role: "results file", name: name})
	}
	var outs []namedFile
	if f := streamFile(ios.Out); f != nil {
		outs = append(outs, namedFile{role: "standard output", file: f})
	}
	if opts.Report != "" {
		outs = append(outs, namedFile{role: "--report", name: opts.Report})
	}
	if err := checkFiles(ins, outs); err != nil {
		return usageError(err)
	}

	files := make([]*os.File, 0, len(opts.Files))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	srcs := make([]report.Source, 0, len(opts.Files))
	for _, name := range opts.Files {
		f, err := os.Open(name)
		if err == nil {
			files = append(files, f)
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
				err = fmt.Errorf("%s is not a regular file", name)
			}
		}
		if err != nil {
			return usageErrorf("summarize: %w", err)
		}
		srcs = append(srcs, report.Source{Name: name, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(io.NewSectionReader(f, 0, 1<<62)), nil
		}})
	}

	var reportFile *outputFile
	if opts.Report != "" {
		if reportFile, err = openOutput("--report", opts.Report, false); err != nil {
			return usageError(err)
		}
	}
	started := false
	defer func() {
		if reportFile != nil && !started {
			reportFile.abandon()
		}
	}()

	sum, err := report.SummarizeTop(ctx, srcs, opts.ReportHosts, opts.ReportProxies)
	switch {
	case errors.Is(err, results.ErrNotResults):
		return usageError(err)
	case err != nil:
		return err
	}
	warn := newWarnings(ios.stderr(), false)
	for _, name := range sum.Torn {
		warn.warn(name + ": left out its torn last line")
	}
	if reportFile != nil {
		if err := reportFile.start(); err != nil {
			return usageError(err)
		}
		started = true
		if err := writeReport(reportFile.f, sum.Report); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	fmt.Fprintf(ios.Out, "%s from %s\n", count(sum.Report.Jobs, "line"), summarizedFrom(opts.Files, sum.Records))
	report.WriteSummary(ios.Out, sum.Report)
	if sum.Report.Failed > 0 {
		return ErrNotAllOK
	}
	return nil
}

// summarizedFrom says what the lines were counted from.
func summarizedFrom(files []string, records int) string {
	if len(files) == 1 {
		return fmt.Sprintf("%s in %s", count(records, "record"), files[0])
	}
	return fmt.Sprintf("%s in %d files", count(records, "record"), len(files))
}

// count is n and noun, plural when n is not 1: "1 line", "3 lines".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
