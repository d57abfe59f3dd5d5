package cmd

import (
	"context"
	"os"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// linesTaken returns how many lines of the named inputs a run takes (each
// gets a record): the lines that are neither blank nor comments, in shard
// (every line for the zero Shard), that done, the lines --resume found
// finished, does not hold (done may be nil), JSON request lines read with
// bodies of up to maxBody bytes (--max-request-body). They are counted by
// input.Count, with the engine's own reader, so the progress bar's total
// is what the run takes. It returns -1 when an input is standard input or
// cannot be read, or when ctx is done first.
func linesTaken(ctx context.Context, names []string, shard input.Shard, done *results.DoneSet, maxBody int64) int64 {
	var n int64
	for _, name := range names {
		if name == "-" {
			return -1
		}
		c, err := fileLinesTaken(ctx, name, shard, done, maxBody)
		if err != nil {
			return -1
		}
		n += c
	}
	return n
}

func fileLinesTaken(ctx context.Context, name string, shard input.Shard, done *results.DoneSet, maxBody int64) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return input.Count(ctx, input.Source{Name: name, R: f}, shard, done, maxBody)
}
