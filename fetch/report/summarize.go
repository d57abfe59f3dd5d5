package report

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// Source is one results file for Summarize: its name, for messages,
// and how to read it. Open is called once for each of Summarize's two
// passes and must give the same bytes both times; the second pass reads no
// further than the first did, so a file that grows meanwhile (a run still
// writing it) is read as it was.
type Source struct {
	Name string
	Open func() (io.ReadCloser, error)
}

// Summary is what Summarize read: the report of the lines counted, and how
// it got there.
type Summary struct {
	Report  *Report
	Records int      // whole records read, in all the sources
	Torn    []string // the names of the sources whose torn last line was left out
}

// Summarize rebuilds the report of a run from its results files: the
// resumed runs of one list, or the shards of a distributed run. Each
// (input, line, URL) counts once, by its final record: the last one that
// ends it (neither cancelled, coordinator, nor banned in phase queue), else
// the last one that is not cancelled, else the last one. Per proxy and per host, attempts, ok
// and failed count the final attempt and the tries of the records counted,
// and the phases' quantiles come from theirs. What records do not hold is
// left at zero: elapsed_ms, max_in_flight, the proxies' health.
//
// It streams the sources twice: first to choose each line's final record,
// keeping 16 bytes per line (its line number and a 32-bit hash of its URL,
// per input, and which record is its final one), then to count the records
// chosen. A line that is not a whole JSON record is an error wrapping
// ErrNotResults, except a torn last line (no line end), which is left out
// and named in Summary.Torn. When ctx is done it stops with ctx.Err().
//
// Summarize lists at most DefaultHosts hosts and DefaultProxies
// proxies in the report; it is shorthand for SummarizeTop(ctx, srcs,
// DefaultHosts, DefaultProxies).
func Summarize(ctx context.Context, srcs []Source) (*Summary, error) {
	return SummarizeTop(ctx, srcs, DefaultHosts, DefaultProxies)
}

// SummarizeTop is Summarize with a report listing at most reportHosts
// hosts and reportProxies proxies, the busiest, as a run's report does (see
// Report). Records do not say which proxies there were, so the proxies are
// chosen as the hosts are: by space-saving, in memory that does not grow
// with their number (see Proxy.Missed).
func SummarizeTop(ctx context.Context, srcs []Source, reportHosts, reportProxies int) (*Summary, error) {
	s := &summarizer{keys: map[string]*finalKeys{}, reportHosts: reportHosts, reportProxies: reportProxies}
	sizes := make([]int64, len(srcs))
	sum := &Summary{}
	var ordinal uint64
	for i, src := range srcs {
		var kr results.KeyReader
		n := 0
		size, torn, err := readLines(ctx, src, -1, func(line []byte) error {
			n++
			input, _, key, end, err := kr.Read(line)
			if err != nil {
				return fmt.Errorf("fetch: %s: line %d %w", src.Name, n, err)
			}
			rank := ordinal
			switch end {
			case results.EndFinal:
				rank |= finalBit | settledBit
			case results.EndCoordinator, results.EndHostBanned:
				rank |= settledBit
			}
			s.keyList(input).add(key, rank)
			ordinal++
			return nil
		})
		if err != nil {
			return nil, err
		}
		sizes[i] = size
		if torn {
			sum.Torn = append(sum.Torn, src.Name)
		}
	}
	sum.Records = int(ordinal)
	for _, k := range s.keys {
		k.finish()
	}

	s.start()
	ordinal = 0
	for i, src := range srcs {
		n := 0
		_, _, err := readLines(ctx, src, sizes[i], func(line []byte) error {
			n++
			var rec results.Record
			if err := results.Unmarshal(line, &rec); err != nil {
				return fmt.Errorf("fetch: %s: line %d %w", src.Name, n, err)
			}
			if s.isFinal(&rec, ordinal) {
				s.count(&rec)
			}
			ordinal++
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sum.Report = s.report()
	return sum, nil
}

// The bits of a rank above a record's ordinal. finalBit marks a record
// that ends its line (see results.EndFinal); settledBit one that is not
// cancelled. A final record outranks every other of its line, one that is
// not cancelled (coordinator, or banned in phase queue: never the URL's
// own end, so --resume takes its line again) outranks the cancelled ones,
// and the later outranks the earlier among records alike. The workers of
// a shared queue may both record a line one took over from the other:
// which file comes first must not decide.
const (
	finalBit   = 1 << 63
	settledBit = 1 << 62
	rankBits   = finalBit | settledBit
)

// readLines calls fn with each whole line of src, its line end included,
// reading at most limit bytes (all of it when limit < 0). It returns the
// size of the whole lines read and whether a torn last line followed them.
func readLines(ctx context.Context, src Source, limit int64, fn func([]byte) error) (int64, bool, error) {
	rc, err := src.Open()
	if err != nil {
		return 0, false, fmt.Errorf("fetch: %w", err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if limit >= 0 {
		r = io.LimitReader(rc, limit)
	}
	br := bufio.NewReaderSize(r, 256<<10)
	var size int64
	var long []byte // a line longer than br's buffer, put together
	for {
		if err := ctx.Err(); err != nil {
			return size, false, err
		}
		frag, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, frag...)
			continue
		}
		line := frag
		if len(long) > 0 {
			long = append(long, frag...)
			line = long
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if ferr := fn(line); ferr != nil {
				return size, false, ferr
			}
			size += int64(len(line))
			long = long[:0]
			continue
		}
		switch {
		case errors.Is(err, io.EOF):
			return size, len(bytes.TrimSpace(line)) > 0, nil
		case err != nil:
			return size, false, fmt.Errorf("fetch: reading %s: %w", src.Name, err)
		}
	}
}

// finalKeys holds, for the lines of one input, which record is each line's
// final one: entries of the line's key (as in DoneSet) and the rank of its
// best record so far. Entries are appended as records come and compacted,
// sorted by key with one entry per key, whenever the room made for them
// is full, so that memory follows the number of lines, not of records.
type finalKeys struct {
	e []finalEntry
}

type finalEntry struct {
	key, rank uint64
}

func (k *finalKeys) add(key, rank uint64) {
	if len(k.e) == cap(k.e) {
		// Full: compact, then make room for as many entries again.
		k.compact()
		k.e = slices.Grow(k.e, max(len(k.e), 1024))
	}
	k.e = append(k.e, finalEntry{key, rank})
}

// compact sorts the entries by key and keeps the highest rank of each.
func (k *finalKeys) compact() {
	slices.SortFunc(k.e, func(a, b finalEntry) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank))
	})
	out := k.e[:0]
	for i, e := range k.e {
		if i+1 < len(k.e) && k.e[i+1].key == e.key {
			continue // a higher rank of the same key follows
		}
		out = append(out, e)
	}
	k.e = out
}

// finish compacts the entries for good and gives back the room left.
func (k *finalKeys) finish() {
	k.compact()
	if cap(k.e)-len(k.e) > len(k.e)/8 {
		k.e = slices.Clone(k.e)
	}
}

// rank returns the rank of key's final record, after compact.
func (k *finalKeys) rank(key uint64) (uint64, bool) {
	i, found := slices.BinarySearchFunc(k.e, key, func(e finalEntry, key uint64) int { return cmp.Compare(e.key, key) })
	if !found {
		return 0, false
	}
	return k.e[i].rank, true
}

// summarizer counts the final records into a report.
type summarizer struct {
	keys          map[string]*finalKeys // by input
	rep           Report
	reportHosts   int
	reportProxies int
	hosts         *HostTable
	proxies       *topTable[ProxyStats]
	proxiesOther  ProxiesOther // Proxies is filled in by report
}

func (s *summarizer) keyList(input []byte) *finalKeys {
	k := s.keys[string(input)] // no allocation for an input seen before
	if k == nil {
		k = &finalKeys{}
		s.keys[string(input)] = k
	}
	return k
}

// isFinal reports whether rec, the ordinal-th record read, is its line's
// final record.
func (s *summarizer) isFinal(rec *results.Record, ordinal uint64) bool {
	k := s.keys[rec.Input]
	if k == nil {
		return false
	}
	rank, ok := k.rank(results.DoneKey(rec.Line, rec.URL))
	return ok && rank&^rankBits == ordinal
}

func (s *summarizer) start() {
	s.rep = Report{
		ByKind:  map[string]int{},
		ByPhase: map[string]int{},
	}
	s.hosts = NewHostTable(s.reportHosts)
	s.proxies = newTopTable(s.reportProxies, func(e *topEntry[ProxyStats]) {
		e.v.Proxy.Attempts = e.attempts
		s.proxiesOther.add(&e.v.Proxy)
	})
}

// count adds a final record: the record to the totals, its tries and final
// attempt to their proxies and to its host.
func (s *summarizer) count(rec *results.Record) {
	s.rep.Jobs++
	if rec.OK {
		s.rep.OK++
	} else {
		s.rep.Failed++
		if rec.Error != nil {
			s.rep.ByKind[rec.Error.Kind]++
			s.rep.ByPhase[rec.Error.Phase]++
		}
	}
	if len(rec.Tries) == 0 && rec.Proxy == "" {
		return // no attempt: an invalid line, or one that never got a permit
	}
	_, host, why := input.ParseTarget(rec.URL)
	if why != "" {
		host = ""
	}
	for _, t := range rec.Tries {
		s.attempt(t.Proxy, t.Pool, host, t.Error == nil, t.Error, &t.Phases)
	}
	if rec.Proxy != "" {
		s.attempt(rec.Proxy, rec.Pool, host, rec.OK, rec.Error, &rec.Phases)
	}
}

// attempt adds one attempt, which ended with err, as the engine's
// collector does in a run for an attempt, and for a ban when err is one.
func (s *summarizer) attempt(proxy, pool, host string, ok bool, err *results.Error, phases *results.PhaseTimes) {
	if proxy == "" {
		return
	}
	banned := 0
	if err != nil && err.Kind == results.KindBanned {
		banned = 1
	}
	if host != "" {
		s.hosts.Add(host, ok, 0)
	}
	if banned > 0 {
		s.hosts.Ban(host)
	}
	e := s.proxies.count(proxy)
	if e == nil {
		r := Proxy{Pool: pool, Attempts: 1, Banned: banned}
		if ok {
			r.OK = 1
		} else {
			r.Failed = 1
		}
		s.proxiesOther.add(&r)
		return
	}
	ps := &e.v
	p := &ps.Proxy
	p.Pool = pool // Attempts and Missed are the entry's, filled in by report
	if ok {
		p.OK++
	} else {
		p.Failed++
	}
	p.Banned += banned
	ps.addPhases(phases)
}

func (s *summarizer) report() *Report {
	rep := s.rep
	rep.Hosts, rep.HostsOther = s.hosts.Report()
	rep.Proxies = make(map[string]*Proxy, len(s.proxies.heap))
	for _, e := range s.proxies.heap {
		e.v.Proxy.Attempts, e.v.Proxy.Missed = e.attempts, e.missed
		rep.Proxies[e.key] = e.v.finish()
	}
	if other, n := s.proxiesOther, s.proxies.untracked(); other.Attempts > 0 || n > 0 {
		other.Proxies = n
		rep.ProxiesOther = &other
	}
	return &rep
}
