package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch"
)

// progressInterval is how often the progress bar polls the engine and
// draws.
const progressInterval = 150 * time.Millisecond

// statser is the part of *fetch.Engine the progress bar reads.
type statser interface {
	Stats() fetch.Stats
}

// startProgress draws a progress bar on w, polling eng on a ticker, until
// the returned stop function is called; stop clears the bar from the line.
// Whatever else writes to w meanwhile erases the bar first (see
// lockedWriter).
// total is called once, in the background, for the number of URLs; -1 (or
// until it returns) shows a spinner instead of a bar. columns, when not
// nil, is the terminal's width (0 when unknown), read at every draw: the
// line is cut to fit it.
func startProgress(ctx context.Context, w *lockedWriter, eng statser, total func(context.Context) int64, columns func() int) (stop func()) {
	countCtx, cancelCount := context.WithCancel(ctx)
	totals := make(chan int64, 1)
	go func() { totals <- total(countCtx) }()

	p := &progressLine{w: w, columns: columns, start: time.Now(), max: -1}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case n := <-totals:
				if n > 0 {
					p.max = n
				}
			case <-t.C:
			}
			p.draw(time.Now(), eng.Stats())
		}
	}()
	return func() {
		cancelCount()
		close(done)
		wg.Wait()
		p.clear()
	}
}

// progressLine is the one line of progress on a terminal: a bar when the
// total is known, else a spinner; done/total and the rate over the last
// few seconds; the counts; the time taken and, with a total, the time
// left. Each draw returns to the start of the line, writes over the last
// one and erases what is left of it.
// It is drawn by hand, not by a progress-bar library: the one used before
// brought a colour and a Unicode library, whose set-up cost every start of
// fetch, drawn or not, 0.5 to 0.8 ms on a small VM (fetch --version: 17.3
// against 16.5 ms, medians of 6 x 50 runs taking turns).
type progressLine struct {
	w       *lockedWriter
	columns func() int
	start   time.Time
	max     int64 // the total, or -1 while unknown

	// The bar only narrows while the terminal keeps its width, so that it
	// does not change width, or come and go, as the rate and the times
	// change length: on barCols columns it is at most barWidth-barCut
	// wide. The zero value is the full bar on a terminal of unknown width.
	barCols, barCut int

	frame   int                    // the spinner's
	samples [rateWindow]rateSample // ring of the last draws, for the rate
	n       int                    // draws so far
	buf     []byte
}

// rateSample is the count done at one draw.
type rateSample struct {
	at   time.Time
	done int64
}

// rateWindow is how many draws the rate looks back: 4.8 s at
// progressInterval.
const rateWindow = 32

const (
	barWidth = 30 // the bar's width where the terminal has room
	minBar   = 5  // narrower than this, the bar goes and the percentage stays
	barFill  = "#"
	spinner  = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
)

// draw writes the line for stats s at now.
func (p *progressLine) draw(now time.Time, s fetch.Stats) {
	if p.max > 0 && s.Done > p.max { // the count was short; never overflow the bar
		p.max = s.Done
	}
	oldest := p.samples[p.n%rateWindow] // the oldest kept, when the ring is full
	if p.n < rateWindow {
		oldest = rateSample{at: p.start}
	}
	p.samples[p.n%rateWindow] = rateSample{at: now, done: s.Done}
	p.n++
	rate := 0.0
	if d := now.Sub(oldest.at).Seconds(); d > 0 {
		rate = float64(s.Done-oldest.done) / d
	}
	cols := 0
	if p.columns != nil {
		cols = p.columns()
	}
	if cols != p.barCols {
		p.barCols, p.barCut = cols, 0
	}
	line, bar := progressText(p.max, s, rate, now.Sub(p.start), p.frame, cols, barWidth-p.barCut)
	if p.max > 0 {
		p.barCut = barWidth - bar
	}
	p.frame++
	b := append(p.buf[:0], '\r')
	b = append(b, line...)
	b = append(b, eraseLine...) // what a longer line left
	p.buf = b
	p.w.drawBar(b)
}

// eraseLine erases from the cursor to the end of the line (ECMA-48 EL,
// which terminals on Linux and macOS and Windows Terminal understand).
const eraseLine = "\x1b[K"

// clear blanks the line and returns to its start.
func (p *progressLine) clear() { p.w.clearBar() }

// progressText is the line's text: with a total (max > 0),
//
//	40% |############                  | (4/10, 2.00 url/s) ok 3 failed 1 in flight 2 [2s:3s]
//
// and without, a spinner frame for the bar and the percentage, "-" for the
// total and no time left. On a terminal of cols columns (0: unknown) the
// line takes at most cols-1 of them, as the last column would wrap on some
// terminals: the bar narrows first (to barMax at most), then goes (the
// percentage stays), and only then is the line cut from the right, where
// the counts and times are, at a space, so that done/total and the rate
// show on any terminal of 80 columns. bar is the bar's width, 0 without.
func progressText(max int64, s fetch.Stats, rate float64, elapsed time.Duration, frame, cols, barMax int) (line string, bar int) {
	counts := fmt.Sprintf("ok %d failed %d in flight %d", s.OK, s.Failed, s.InFlight)
	if max <= 0 {
		r := []rune(spinner)
		return fit(fmt.Sprintf("%c (%d/-, %s url/s) %s [%s]", r[frame%len(r)], s.Done,
			rateString(rate), counts, shortDuration(elapsed)), cols), 0
	}
	done := min(s.Done, max)
	pct := fmt.Sprintf("%3d%%", done*100/max)
	rest := fmt.Sprintf(" (%d/%d, %s url/s) %s [%s:%s]", s.Done, max, rateString(rate),
		counts, shortDuration(elapsed), timeLeft(max-done, rate))
	width := barMax
	if cols > 0 {
		// the room left for the bar, less its two ends and a space
		width = min(barMax, cols-1-len(pct)-utf8.RuneCountInString(rest)-3)
	}
	if width < minBar {
		return fit(pct+rest, cols), 0
	}
	fill := int(done * int64(width) / max)
	return pct + " |" + strings.Repeat(barFill, fill) + strings.Repeat(" ", width-fill) + "|" + rest, width
}

// fit cuts line to at most cols-1 runes, at a space when there is one, so
// that no field shows half; cols 0 is a terminal of unknown width, where
// the line stays whole.
func fit(line string, cols int) string {
	if cols <= 0 || utf8.RuneCountInString(line) < cols {
		return line
	}
	t := truncateRunes(line, cols-1)
	if line[len(t)] != ' ' {
		if i := strings.LastIndexByte(t, ' '); i > 0 {
			t = t[:i]
		}
	}
	return strings.TrimRight(t, " ")
}

// rateString rounds a rate for people: whole numbers from 100, one
// decimal from 10, two below (3 significant figures from 1 up).
func rateString(r float64) string {
	switch {
	case r >= 99.95: // rounds to at least 100.0
		return strconv.FormatFloat(math.Round(r), 'f', 0, 64)
	case r >= 9.995: // rounds to at least 10.00
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// maxTimeLeft is the longest time left worth showing; beyond it, or when
// nothing moves, the time left is "?".
const maxTimeLeft = 1000 * time.Hour

// timeLeft is the time the rest takes at rate.
func timeLeft(rest int64, rate float64) string {
	if rest <= 0 {
		return "0s"
	}
	secs := float64(rest) / rate
	if rate <= 0 || secs > maxTimeLeft.Seconds() {
		return "?"
	}
	return shortDuration(time.Duration(secs * float64(time.Second)))
}

// shortDuration is d in whole seconds as 59s, 1m40s, 2h3m.
func shortDuration(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// countURLLines counts the lines of the named files that are neither blank
// nor comments, the way the engine takes them. It returns -1 when an input
// is standard input, cannot be read, or ctx is done first.
func countURLLines(ctx context.Context, names []string) int64 {
	var n int64
	for _, name := range names {
		if name == "-" {
			return -1
		}
		c, err := countFile(ctx, name)
		if err != nil {
			return -1
		}
		n += c
	}
	return n
}

func countFile(ctx context.Context, name string) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countLines(ctx, f)
}

// countLines counts the URL lines of r: trimmed, not empty, not starting
// with '#'. Long lines are read in pieces, never whole.
func countLines(ctx context.Context, r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	first, start := true, true
	for i := 0; ; i++ {
		if i%4096 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		piece, err := br.ReadSlice('\n')
		if start && len(piece) > 0 {
			t := piece
			if first {
				t = bytes.TrimPrefix(t, []byte("\ufeff"))
				first = false
			}
			t = bytes.TrimSpace(t)
			if len(t) > 0 && t[0] != '#' {
				n++
			}
			// A piece that is only white space at the start of a long line
			// is followed by the rest; treat that rest as a line start.
			start = len(t) == 0
		}
		if err == nil {
			start = true
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
