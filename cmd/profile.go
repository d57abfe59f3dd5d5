package cmd

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
	"sync"
)

// profiles are the --cpuprofile and --memprofile files of a run, opened
// (and checked) with the other outputs before any request. The CPU
// profile itself runs from before the proxy list is read (see earlyCPU),
// so that it shows the start of a run through a large pool too.
type profiles struct {
	cpu, mem *outputFile
	early    *earlyCPU // the CPU profile, running since the flags were read; set with cpu
}

// earlyCPU is a CPU profile started before its file can be made: the
// file is made, and checked, with the other outputs, once the flags are
// read, the proxy list with them. Until the file is attached, what the
// profile writes is held in memory (Go's profiler writes when it stops,
// so in practice nothing).
type earlyCPU struct {
	mu       sync.Mutex
	held     bytes.Buffer
	w        io.Writer // the file, once attached
	attached bool
	stopped  bool
}

// startEarlyCPU starts the CPU profile.
func startEarlyCPU() (*earlyCPU, error) {
	e := &earlyCPU{}
	if err := pprof.StartCPUProfile(e); err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return e, nil
}

func (e *earlyCPU) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.w == nil {
		return e.held.Write(p)
	}
	return e.w.Write(p)
}

// attach has the profile written to w from now on, what it held first.
func (e *earlyCPU) attach(w io.Writer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attached = true
	_, err := w.Write(e.held.Bytes())
	e.held = bytes.Buffer{}
	e.w = w
	return err
}

// stop stops the profile; it writes what is left before it returns.
func (e *earlyCPU) stop() {
	if e.stopped {
		return
	}
	e.stopped = true
	pprof.StopCPUProfile()
}

// abandon stops the profile of a run that never got to attach it (a
// usage error), so that nothing of it is left running or held.
func (e *earlyCPU) abandon() {
	if e != nil && !e.attached {
		e.stop()
	}
}

// open opens the profile files that were asked for and adds them to outs.
func (p *profiles) open(cpu, mem string, outs []*outputFile) ([]*outputFile, error) {
	var err error
	if cpu != "" {
		if p.cpu, err = openOutput("--cpuprofile", cpu, false); err != nil {
			return outs, err
		}
		outs = append(outs, p.cpu)
	}
	if mem != "" {
		if p.mem, err = openOutput("--memprofile", mem, false); err != nil {
			return outs, err
		}
		outs = append(outs, p.mem)
	}
	return outs, nil
}

// start starts the CPU profile. The function it returns stops it, writes
// the heap profile (after a garbage collection, so that it shows what is
// live at the end, besides every allocation sampled) and closes the files.
func (p *profiles) start() (stop func() error, err error) {
	if p.cpu != nil {
		if err := p.early.attach(p.cpu.f); err != nil {
			p.early.stop()
			p.cpu.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if p.cpu != nil {
			p.early.stop()
			if err := p.cpu.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--cpuprofile: %w", err))
			}
		}
		if p.mem != nil {
			runtime.GC()
			if err := pprof.Lookup("allocs").WriteTo(p.mem.f, 0); err != nil {
				errs = append(errs, fmt.Errorf("--memprofile: %w", err))
			}
			if err := p.mem.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--memprofile: %w", err))
			}
		}
		if len(errs) > 0 {
			return errs[0]
		}
		return nil
	}, nil
}
