package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
)

// fetchRun opens every input and output before any request, runs the engine
// and writes the results, the report and the summary. cpu is the CPU
// profile, running since the flags were read, when --cpuprofile is set.
func fetchRun(ctx context.Context, opts *FetchOptions, cpu *earlyCPU) (err error) {
	ios := opts.IO
	if err := checkFiles(opts.inputFiles(), opts.outputFiles()); err != nil {
		return usageError(err)
	}
	inputs, closeInputs, err := openInputs(ios, opts.Inputs)
	if err != nil {
		return usageError(err)
	}
	defer closeInputs()

	// Every output is checked before any is emptied or made, so that a
	// usage error leaves the files as they were: files it had to create to
	// check them are removed again.
	var outs []*outputFile
	started := false
	defer func() {
		if !started {
			for _, o := range outs {
				o.abandon()
			}
		}
	}()
	var reportFile *outputFile
	if opts.Report != "" {
		if reportFile, err = openOutput("--report", opts.Report, false); err != nil {
			return usageError(err)
		}
		outs = append(outs, reportFile)
	}
	prof := profiles{early: cpu}
	if outs, err = prof.open(opts.CPUProfile, opts.MemProfile, outs); err != nil {
		return usageError(err)
	}
	out := ios.Out
	var resultsFile *outputFile
	if opts.Output != "" && opts.Output != "-" {
		if resultsFile, err = openOutput("--output", opts.Output, opts.Resume); err != nil {
			return usageError(err)
		}
		outs = append(outs, resultsFile)
		out = resultsFile.f
	}
	if opts.Resume {
		opts.endGCPause() // reading 3,000,000 records is garbage, not state
		if opts.Config.Done, err = loadResume(ctx, ios, resultsFile, opts.Quiet); err != nil {
			return usageError(err)
		}
	}
	warn := newWarnings(ios.stderr(), opts.Quiet)
	mx, err := startMetrics(&opts.Metrics, opts.Config.Proxies, notesTo(ios, opts.Quiet))
	if err != nil {
		return usageError(err)
	}
	defer func() { mx.stop(ctx, started) }()
	if mx != nil {
		opts.Config.Observer = mx.m
	}
	closeCoordinator, err := opts.dialCoordinator(ctx, warn)
	if err != nil {
		return err
	}
	defer closeCoordinator()
	src, closeWorker, err := opts.startWorker(ctx, mx)
	if err != nil {
		return err
	}
	defer closeWorker() // before closeCoordinator: it puts lines back
	opts.Config.Warn = warn.warn
	defer routeLog(warn)() // after Close: the transports log until then
	// The engine is handed the only reference to the proxy list: it keeps
	// what it needs of them, and a large list is collected once the engine
	// has dropped it, before it builds the scheduler (see fetch.New).
	cfg := opts.Config
	large := len(cfg.Proxies) >= largePool
	if large {
		cfg.ListDropped = runtime.GC
	}
	opts.Config.Proxies = nil
	eng, err := fetch.New(cfg)
	if err != nil {
		return usageError(err)
	}
	defer eng.Close()
	if mx != nil {
		mx.m.Watch(eng)
	}
	opts.endGCPause()
	if large {
		// What building the engine left behind (the scheduler's
		// configuration; the list was collected in ListDropped) is collected now, so that the run's allocations
		// reuse its memory instead of growing the heap into pages the
		// kernel must hand over one by one.
		runtime.GC()
		// What it found live (the routes and the scheduler's state, and
		// --resume's done set) stays so all run long: the heap's goal is set above it by what the
		// run makes, not by its size (see gcfloor.KeepLive).
		floorFrom(ctx).KeepLive()
	}
	if dir := opts.Config.SaveDir; dir != "" {
		if err := fetch.PrepareSaveDir(dir, opts.Config.Timeout); err != nil {
			return usageErrorf("--save-dir: %w", err)
		}
	}
	for _, o := range outs {
		if err := o.start(); err != nil {
			return usageError(err)
		}
	}
	started = true
	if resultsFile != nil {
		defer func() {
			if cerr := resultsFile.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--output: %w", cerr)
			}
		}()
	}
	if reportFile != nil {
		defer reportFile.Close()
	}
	stopProfiles, err := prof.start()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stopProfiles(); perr != nil && err == nil {
			err = perr
		}
	}()

	var total func(context.Context) int64
	if !opts.Quiet && ios.IsStderrTTY() && src == nil {
		names := inputNames(opts.Inputs)
		shard, done, maxBody := opts.Config.Shard, opts.Config.Done, opts.Config.MaxRequestBody
		total = func(ctx context.Context) int64 { return linesTaken(ctx, names, shard, done, maxBody) }
	}
	var lines fetch.LineSource // nil: the inputs
	if src != nil {
		lines = src
	}
	rep, runErr := runLines(ctx, ios, warn, eng, inputs, lines, out, opts.Quiet, total)
	if opts.Resume && rep != nil && !opts.Quiet && src == nil {
		n := eng.Stats().Skipped
		lines := "lines"
		if n == 1 {
			lines = "line"
		}
		fmt.Fprintf(ios.stderr(), "resumed %s: skipped %d %s it had already finished; the counts above are this run's only\n",
			opts.Output, n, lines)
	}
	if reportFile != nil && rep != nil {
		if err := writeReport(reportFile.f, rep); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return opts.workResult(runResult(rep, runErr))
}

// inputFiles are the files fetch reads, for checkFiles: the URL inputs
// (standard input among them, when it is a file), the proxy lists and the
// CA certificates.
func (opts *FetchOptions) inputFiles() []namedFile {
	var fs []namedFile
	for _, name := range inputNames(opts.Inputs) {
		if name == "-" {
			if f := streamFile(opts.IO.In); f != nil {
				fs = append(fs, namedFile{role: "standard input", file: f})
			}
			continue
		}
		fs = append(fs, namedFile{role: "input", name: name})
	}
	for _, name := range opts.ProxyFiles {
		fs = append(fs, namedFile{role: "proxy list", name: name})
	}
	if opts.CACert != "" {
		fs = append(fs, namedFile{role: "--cacert", name: opts.CACert})
	}
	return fs
}

// outputFiles are the files fetch writes, for checkFiles: the results (a
// file, or standard output when it is one) and the report.
func (opts *FetchOptions) outputFiles() []namedFile {
	var fs []namedFile
	if opts.Output != "" && opts.Output != "-" {
		fs = append(fs, namedFile{role: "--output", name: opts.Output})
	} else if f := streamFile(opts.IO.Out); f != nil {
		fs = append(fs, namedFile{role: "standard output", file: f})
	}
	if opts.Report != "" {
		fs = append(fs, namedFile{role: "--report", name: opts.Report})
	}
	for _, p := range []struct{ role, name string }{{"--cpuprofile", opts.CPUProfile}, {"--memprofile", opts.MemProfile}} {
		if p.name != "" {
			fs = append(fs, namedFile{role: p.role, name: p.name})
		}
	}
	return fs
}

// runEngine runs eng over inputs with the progress bar (when total is not
// nil), writes the records to out as JSON lines, and prints the summary
// unless quiet. It returns what Run returned, or the error of the final
// flush of the records.
func runEngine(ctx context.Context, ios *IOStreams, warn *warnings, eng *fetch.Engine, inputs []input.Source, out io.Writer, quiet bool, total func(context.Context) int64) (*report.Report, error) {
	return runLines(ctx, ios, warn, eng, inputs, nil, out, quiet, total)
}

// runLines is runEngine over the lines of src instead of inputs, when src
// is not nil.
func runLines(ctx context.Context, ios *IOStreams, warn *warnings, eng *fetch.Engine, inputs []input.Source, src fetch.LineSource, out io.Writer, quiet bool, total func(context.Context) int64) (*report.Report, error) {
	ow := &outputWriter{w: guardWrites(ctx, out)}
	w := results.NewJSONLWriter(ow)
	defer onSecondInterrupt(ctx, eng.StopNow)()
	stop := func() {}
	if total != nil {
		stop = startProgress(ctx, warn.out, eng, total, ios.stderrColumns)
	}
	var rep *report.Report
	var err error
	if src != nil {
		rep, err = eng.RunSource(ctx, src, w)
	} else {
		rep, err = eng.Run(ctx, inputs, w)
	}
	stop()
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("writing results: %w", ferr)
	}
	if rep != nil && ow.err != nil {
		rep.Stopped = stoppedOutput
	}
	if rep != nil && !quiet {
		report.WriteSummary(ios.stderr(), rep) // through the lock: an interrupt's message may come meanwhile
	}
	return rep, err
}

// stoppedOutput is the report's "stopped" for a run whose results could not
// be written.
const stoppedOutput = "output could not be written"

// outputWriter remembers the first error of writing the results.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.err == nil {
		o.err = err
	}
	return n, err
}

// runResult turns the outcome of a run into the command's error.
func runResult(rep *report.Report, err error) error {
	switch {
	case err != nil:
		return err
	case rep != nil && rep.Interrupted:
		return context.Canceled
	case rep != nil && rep.Failed > 0:
		return ErrNotAllOK
	}
	return nil
}

// openInputs opens every input in order, so that an unreadable one is found
// before any request; "-" and no input at all are standard input.
func openInputs(ios *IOStreams, names []string) ([]input.Source, func(), error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var inputs []input.Source
	for _, name := range inputNames(names) {
		if name == "-" {
			inputs = append(inputs, input.Source{Name: "-", R: ios.In})
			continue
		}
		f, err := os.Open(name)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil && fi.IsDir() {
				err = fmt.Errorf("%s is a directory", name)
			}
			if err != nil {
				f.Close()
			}
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("input: %w", err)
		}
		files = append(files, f)
		inputs = append(inputs, input.Source{Name: name, R: f})
	}
	return inputs, closeAll, nil
}

// inputNames is the list of inputs, with standard input when there is none.
func inputNames(names []string) []string {
	if len(names) == 0 {
		return []string{"-"}
	}
	return names
}

// loadResume reads the results file of the run that --resume continues,
// open for appending: it cuts a torn last line (saying so on stderr unless
// quiet) and reads which lines are finished. A file that did not exist
// holds nothing: the run starts fresh. Reading a large file takes seconds;
// when ctx is cancelled meanwhile it stops with ctx.Err().
func loadResume(ctx context.Context, ios *IOStreams, out *outputFile, quiet bool) (*results.DoneSet, error) {
	f, name := out.f, out.name
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = errors.New("--resume needs a regular file")
		}
		return nil, fmt.Errorf("--output %s: %w", name, err)
	}
	cut, err := results.RepairTail(f)
	if err != nil {
		return nil, fmt.Errorf("--output %s: %w", name, err)
	}
	if cut && !quiet {
		fmt.Fprintf(ios.ErrOut, "fetch: repaired torn last line of %s\n", name)
	}
	done, err := results.LoadDone(ctxReader{ctx, f})
	if err != nil {
		return nil, fmt.Errorf("--resume %s: %w", name, err)
	}
	return done, nil
}

// ctxReader reads from r until ctx is done, then fails with ctx.Err().
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeReport writes r as one indented JSON document and closes f.
func writeReport(f *os.File, r *report.Report) error {
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	return f.Close()
}
