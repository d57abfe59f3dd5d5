package cmd

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

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
// total is called once, in the background, for the number of lines the run
// takes (see linesTaken); -1 (or until it returns) shows a spinner instead
// of a bar. columns, when not
// nil, is the terminal's width (0 when unknown), read at every draw: the
// line is cut to fit it.
func startProgress(ctx context.Context, w *lockedWriter, eng statser, total func(context.Context) int64, columns func() int) (stop func()) {
	t := time.NewTicker(progressInterval)
	stopTicks := runProgress(ctx, w, eng, total, columns, t.C)
	return func() {
		stopTicks()
		t.Stop()
	}
}

// runProgress is startProgress drawing at each time received from ticks
// (and once when the total is known) instead of on its own ticker.
func runProgress(ctx context.Context, w *lockedWriter, eng statser, total func(context.Context) int64, columns func() int, ticks <-chan time.Time) (stop func()) {
	countCtx, cancelCount := context.WithCancel(ctx)
	totals := make(chan int64, 1)
	go func() { totals <- total(countCtx) }()

	p := newProgressBar(w, columns, time.Now())
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var now time.Time
			select {
			case <-done:
				return
			case n := <-totals:
				if n > 0 {
					p.max = n
				}
				now = time.Now()
			case now = <-ticks:
			}
			p.draw(now, eng.Stats())
		}
	}()
	return func() {
		cancelCount()
		close(done)
		wg.Wait()
		p.clear()
	}
}

// progressBar is the one line of progress on a terminal, drawn by
// github.com/schollz/progressbar/v3: the percentage and a bar when the
// total is known, else a spinner; then done/total and the rate over the
// last few seconds, the counts, the time taken and, with a total, the time
// left. Those figures are the bar's description, set at every draw: the
// library's own (its count, rate and times) are off, as their width
// cannot be known before they are drawn, and the line must fit the
// terminal. The library's width is set from columns, not with
// OptionFullWidth, which asks the writer's terminal (hidden behind
// lockedWriter) and counts bytes, not columns.
//
// Linking the library costs every start of fetch, drawn or not, about
// 0.17 ms of package initialisation (colorstring compiles two regular
// expressions, progressbar one; GODEBUG=inittrace=1).
//
// Its methods are called from one goroutine at a time; they change the
// library's settings (options applied to the bar as it runs) without its
// lock, and nothing else runs the bar (its spinner turns a frame a draw,
// with no goroutine of its own).
type progressBar struct {
	w       *lockedWriter
	out     *barWriter
	bar     *progressbar.ProgressBar
	columns func() int
	start   time.Time
	max     int64 // the total, or -1 while unknown
	barMax  int64 // the total the bar was last given, 0 while it spins

	// The bar only narrows while the terminal keeps its width, so that it
	// does not change width as the rate and the times change length: on
	// barCols columns it is at most barWidth-barCut wide. The zero value
	// is the full bar on a terminal of unknown width.
	barCols, barCut int

	samples [rateWindow]rateSample // ring of the last draws, for the rate
	n       int                    // draws so far
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
	minBar   = 5  // the bar narrows to this before the text is cut

	// The columns the library's line takes besides the bar's inside and
	// the description: the percentage (5), the bar's ends (2) and four
	// spaces, " 100% |#  |  description " (see progressbar's
	// renderDeterminateProgressBar, with the description at the line's
	// end and no stats); while the total is unknown, the spinner's frame
	// and three spaces, "⠋  description ".
	barLineCols     = 11
	spinnerLineCols = 4
)

// progressTheme is the bar in ASCII, as some terminals draw the library's
// "█" two columns wide.
var progressTheme = progressbar.Theme{Saucer: "#", SaucerPadding: " ", BarStart: "|", BarEnd: "|"}

// spinnerFrames are one column wide each.
var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// newProgressBar returns a bar that draws on w, spinning until max is set.
func newProgressBar(w *lockedWriter, columns func() int, start time.Time) *progressBar {
	out := &barWriter{w: w}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(out),
		progressbar.OptionUseANSICodes(true), // a draw is one write: "\r", the line, erase to its end
		progressbar.OptionSetTheme(progressTheme),
		progressbar.OptionSpinnerCustom(spinnerFrames),
		progressbar.OptionSetSpinnerChangeInterval(0), // a frame a draw, and no goroutine
		progressbar.OptionSetElapsedTime(false),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetWidth(barWidth), // > 0: the spinner's turn is its width
	)
	return &progressBar{w: w, out: out, bar: bar, columns: columns, start: start, max: -1}
}

// barWriter is the library's writer: its draws are lockedWriter.drawBar,
// so that whatever else is written erases the line first, and its clearing
// of the line is lockedWriter.clearBar.
type barWriter struct {
	w     *lockedWriter
	draws int // the lines drawn so far
}

// clearSeq is what progressbar writes to clear its line with ANSI codes.
const clearSeq = "\x1b[2K\r"

func (b *barWriter) Write(p []byte) (int, error) {
	if string(p) == clearSeq {
		b.w.clearBar()
		return len(p), nil
	}
	b.draws++
	b.w.drawBar(p)
	return len(p), nil
}

// draw draws the line for stats s at now.
func (p *progressBar) draw(now time.Time, s fetch.Stats) {
	if p.max > 0 && s.Done > p.max { // the count was short; never overflow the bar
		p.max = s.Done
	}
	rate := p.rate(now, s.Done)
	cols := 0
	if p.columns != nil {
		cols = p.columns()
	}
	if cols != p.barCols {
		p.barCols, p.barCut = cols, 0
	}
	fields := progressFields(p.max, s, rate, now.Sub(p.start))
	width, desc, ok := fitLine(p.max > 0, fields, cols, barWidth-p.barCut)
	if !ok { // too narrow a terminal for any line
		p.w.clearBar()
		return
	}
	progressbar.OptionSetDescription(desc)(p.bar)
	if p.max <= 0 {
		p.bar.RenderBlank() //nolint:errcheck // barWriter does not fail
		return
	}
	p.barCut = barWidth - width
	progressbar.OptionSetWidth(width)(p.bar)
	if p.barMax != p.max || p.bar.IsFinished() {
		// The library draws a full bar once, then no more: start it
		// again (Reset forgets only its own count and clock). Its new
		// total is set unseen, as ChangeMax64 draws the old count.
		p.bar.Reset()
		progressbar.OptionSetVisibility(false)(p.bar)
		p.bar.ChangeMax64(p.max)
		progressbar.OptionSetVisibility(true)(p.bar)
		p.barMax = p.max
	}
	// Set64 draws only when the percentage changes: then draw here.
	drawn := p.out.draws
	p.bar.Set64(s.Done) //nolint:errcheck // within the total, on barWriter
	if p.out.draws == drawn {
		p.bar.RenderBlank() //nolint:errcheck // barWriter does not fail
	}
}

// rate is the rate of done over the last rateWindow draws, the one at now
// included.
func (p *progressBar) rate(now time.Time, done int64) float64 {
	oldest := p.samples[p.n%rateWindow] // the oldest kept, when the ring is full
	if p.n < rateWindow {
		oldest = rateSample{at: p.start}
	}
	p.samples[p.n%rateWindow] = rateSample{at: now, done: done}
	p.n++
	if d := now.Sub(oldest.at).Seconds(); d > 0 {
		return float64(done-oldest.done) / d
	}
	return 0
}

// eraseLine erases from the cursor to the end of the line (ECMA-48 EL,
// which terminals on Linux and macOS and Windows Terminal understand).
const eraseLine = "\x1b[K"

// clear erases the line and returns to its start: through the library,
// and through w, which knows whether a line is drawn even where the
// library forgot it (after Reset).
func (p *progressBar) clear() {
	p.bar.Clear() //nolint:errcheck // barWriter does not fail
	p.w.clearBar()
}

// progressFields are the fields of the text after the bar, which are
// joined by spaces: with a total (max > 0),
//
//	(4/10, 2.00 url/s) ok 3 failed 1 in flight 2 [2s:3s]
//
// and without, "-" for the total and no time left.
func progressFields(max int64, s fetch.Stats, rate float64, elapsed time.Duration) []string {
	total, times := "-", shortDuration(elapsed)
	if max > 0 {
		total = strconv.FormatInt(max, 10)
		times += ":" + timeLeft(max-min(s.Done, max), rate)
	}
	return []string{
		fmt.Sprintf("(%d/%s, %s url/s)", s.Done, total, rateString(rate)),
		fmt.Sprintf("ok %d", s.OK),
		fmt.Sprintf("failed %d", s.Failed),
		fmt.Sprintf("in flight %d", s.InFlight),
		"[" + times + "]",
	}
}

// fitLine fits the line to a terminal of cols columns (0: unknown, where
// the line stays whole and the bar is barMax wide): the line takes at most
// cols-1 of them, as the last column would wrap on some terminals. The bar
// (with a total: known) narrows first, to minBar, then fields go from the
// right, where the counts and times are, so that done/total and the rate
// show on any terminal of 80 columns; when not even the first field fits,
// the bar takes the room. It returns the bar's width and the description,
// and false when the terminal is too narrow for any line.
func fitLine(known bool, fields []string, cols, barMax int) (width int, desc string, ok bool) {
	if cols <= 0 {
		return barMax, strings.Join(fields, " "), true
	}
	room := cols - 1 - spinnerLineCols
	if known {
		room = cols - 1 - barLineCols
	}
	if room < 0 {
		return 0, "", false
	}
	if !known {
		return 0, joinFields(fields, room), true
	}
	whole := strings.Join(fields, " ")
	width = min(barMax, room-utf8.RuneCountInString(whole))
	if width < minBar {
		width = min(minBar, room)
	}
	desc = joinFields(fields, room-width)
	if desc == "" {
		width = min(barMax, room)
	}
	return width, desc, true
}

// joinFields joins as many of fields, from the first, as fit in n runes
// with a space between each two.
func joinFields(fields []string, n int) string {
	var b strings.Builder
	for _, f := range fields {
		sep := 0
		if b.Len() > 0 {
			sep = 1
		}
		if utf8.RuneCountInString(b.String())+sep+utf8.RuneCountInString(f) > n {
			break
		}
		if sep > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
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
