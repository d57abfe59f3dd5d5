package proxies

import (
	"errors"
	"fmt"
	"hash/maphash"
	"os"
)

// Load reads the proxy lists files in order, then the --proxy URLs urls
// (Source "--proxy"), and returns one list in that order without
// duplicates.
//
// A proxy whose identity was seen before is dropped, and warn (if not nil)
// is called with a message naming its FILE:LINE, the word "duplicate", its
// identity and where it was first seen. A list with no proxy gives an error
// wrapping ErrEmpty and naming the file; an unreadable file gives an error
// naming it (wrapping the *fs.PathError); a malformed line or URL gives a
// *LineError. No files and no urls give a nil list: direct connections.
func Load(files, urls []string, warn func(msg string)) ([]Proxy, error) {
	var all []Proxy
	for _, name := range files {
		ps, err := loadFile(name, maxProxies-len(all))
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 {
			return nil, &fileError{file: name, err: ErrEmpty}
		}
		if all == nil {
			all = ps // one list (the usual case): not copied
		} else {
			all = append(all, ps...)
		}
	}
	for _, raw := range urls {
		u, err := ParseURL(raw)
		if err != nil {
			reason := "bad proxy URL"
			var ue *urlError
			if errors.As(err, &ue) {
				reason += ": " + ue.reason
			}
			return nil, &LineError{File: "--proxy", Reason: reason, Err: err}
		}
		p := FromURL(u)
		p.From = "--proxy"
		all = append(all, p)
	}
	return dedup(all, warn), nil
}

func loadFile(name string, room int) ([]Proxy, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("proxies: %w", err) // *fs.PathError names the file
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return parse(name, f, room, size)
}

// firstSeen finds the first proxy of an identity among those dedup keeps,
// by a 64-bit hash of the identity: a map of 8-byte keys and 4-byte values
// instead of one of strings and ints (16 and 8 bytes), its keys compared
// as integers; an identity is compared with the first's only when their
// hashes match.
type firstSeen struct {
	seed   maphash.Seed
	byHash map[uint64]int32 // hash of an identity -> index in out
	other  map[string]int32 // identities whose hash an earlier, other identity has
}

func newFirstSeen(n int) *firstSeen {
	// Made to size: growing it for 100,000 proxies was a tenth of Load's
	// time.
	return &firstSeen{seed: maphash.MakeSeed(), byHash: make(map[uint64]int32, n)}
}

// index returns the index in out of the proxy of identity id; when there
// is none yet (ok false), the proxy that out will hold next is taken as
// the first of id.
func (f *firstSeen) index(out []Proxy, id string) (i int, ok bool) {
	h := maphash.String(f.seed, id)
	j, found := f.byHash[h]
	switch {
	case !found:
		f.byHash[h] = int32(len(out))
		return 0, false
	case out[j].ID == id:
		return int(j), true
	}
	if j, found := f.other[id]; found {
		return int(j), true
	}
	if f.other == nil {
		f.other = make(map[string]int32)
	}
	f.other[id] = int32(len(out))
	return 0, false
}

// dedup drops every proxy whose identity was seen earlier in ps. The
// duplicates among the sessions of one line are told in one warning for
// the line, with their count, not one for each. A proxy whose identity is
// an earlier one's although its credentials differ (8 hex digits of their
// hash: about once in 100,000 session names) is dropped too, since its
// records and limits could not be told apart, with a warning of its own
// (a duplicate identity, of other credentials). It keeps the proxies in
// ps itself, which it changes.
func dedup(ps []Proxy, warn func(string)) []Proxy {
	out := ps[:0] // each kept where it is or earlier
	first := newFirstSeen(len(ps))
	type lineDups struct {
		n     int
		first string // where the first of them was first seen
	}
	var (
		dups  map[*sessionTemplate]*lineDups
		order []*sessionTemplate
		srcOf = map[*sessionTemplate]string{}
	)
	for k := range ps {
		p := &ps[k]
		i, ok := first.index(out, p.ID)
		if !ok {
			if k != len(out) { // moved up over a duplicate; else already in place
				out = append(out, *p)
			} else {
				out = out[:k+1]
			}
			continue
		}
		q := &out[i]
		if sameProxy(p.URL()) != sameProxy(q.URL()) {
			if warn != nil {
				warn(fmt.Sprintf("%s: duplicate identity %s (first at %s) of other credentials (an identity keeps 8 hex digits of their hash), ignored", p.Source(), p.ID, q.Source()))
			}
			continue
		}
		if p.tmpl == nil {
			if warn != nil {
				warn(fmt.Sprintf("%s: duplicate proxy %s (first at %s), ignored", p.Source(), p.ID, q.Source()))
			}
			continue
		}
		if dups == nil {
			dups = map[*sessionTemplate]*lineDups{}
		}
		d := dups[p.tmpl]
		if d == nil {
			d = &lineDups{first: q.Source()}
			dups[p.tmpl] = d
			order = append(order, p.tmpl)
			srcOf[p.tmpl] = p.Source()
		}
		d.n++
	}
	for _, t := range order {
		if warn == nil {
			break
		}
		d := dups[t]
		warn(fmt.Sprintf("%s: %d duplicate proxies of its %d sessions (the first first at %s), ignored", srcOf[t], d.n, t.n, d.first))
	}
	return out
}
