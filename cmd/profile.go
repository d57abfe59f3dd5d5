package cmd

import (
	"fmt"
	"runtime"
	"runtime/pprof"
)

// profiles are the --cpuprofile and --memprofile files of a run, opened
// (and checked) with the other outputs before any request.
type profiles struct {
	cpu, mem *outputFile
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
		if err := pprof.StartCPUProfile(p.cpu.f); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if p.cpu != nil {
			pprof.StopCPUProfile()
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
