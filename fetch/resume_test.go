package fetch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestRun_resumeSkipsDone runs over lines of which some are already done:
// only the others are fetched and recorded, and a URL repeated on another
// line is fetched again. A done line is skipped whether it is written as
// its record shows it (with white space around it: the quick look at the
// text) or otherwise (an upper-case scheme and user information: parsed
// first), and a line whose record is of another URL is fetched, even when
// that URL is the line's text (a line corrected since).
func TestRun_resumeSkipsDone(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	u := func(p string) string { return target.URL + p }
	otherwise := "HTTP://user:pw@" + strings.TrimPrefix(target.URL, "http://") + "/d?size=1"
	// Line 9 did not parse in the last run ("HTTP://us er@host/g", shown
	// without its user information) and has been corrected since: its
	// text is its old record's URL, but not the URL it is now.
	corrected := "HTTP://" + strings.TrimPrefix(target.URL, "http://") + "/g?size=1"
	list := strings.Join([]string{u("/a?size=1"), u("/b?size=1"), u("/c?size=1"), u("/a?size=1"), "bad",
		otherwise, u("/e?size=1"), " \t" + u("/f?size=1") + " ", corrected}, "\n") + "\n"
	previous := fmt.Sprintf(`{"url":%q,"input":"urls","line":1,"ok":true,"error":null}
{"url":%q,"input":"urls","line":2,"ok":false,"error":{"phase":"body","kind":"cancelled","message":"interrupted"}}
{"url":"bad","input":"urls","line":5,"ok":false,"error":{"phase":"input","kind":"invalid","message":"x"}}
{"url":%q,"input":"urls","line":6,"ok":true,"error":null}
{"url":%q,"input":"urls","line":7,"ok":true,"error":null}
{"url":%q,"input":"urls","line":8,"ok":true,"error":null}
{"url":%q,"input":"urls","line":9,"ok":false,"error":{"phase":"input","kind":"invalid","message":"x"}}
`, u("/a?size=1"), u("/b?size=1"), u("/d?size=1"), u("/other"), u("/f?size=1"), corrected)
	done, err := results.LoadDone(strings.NewReader(previous))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fetch.DefaultConfig()
	cfg.Done = done
	eng, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &memWriter{}
	rep, err := eng.Run(context.Background(), []input.Source{{Name: "urls", R: strings.NewReader(list)}}, w)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int]bool{}
	for _, r := range w.recs {
		lines[r.Line] = true
	}
	if rep.Jobs != 5 || !lines[2] || !lines[3] || !lines[4] || !lines[7] || !lines[9] {
		t.Errorf("records for lines %v (%d jobs), want 2, 3, 4, 7 and 9", lines, rep.Jobs)
	}
	if got := eng.Stats().Skipped; got != 4 {
		t.Errorf("%d lines skipped, want 4 (1, 5, 6 and 8)", got)
	}
	for p, want := range map[string]int{"/a?size=1": 1, "/b?size=1": 1, "/c?size=1": 1, "/d?size=1": 0, "/e?size=1": 1, "/f?size=1": 0, "/g?size=1": 1} {
		if got := target.Hits(p); got != want {
			t.Errorf("Hits(%s) = %d, want %d", p, got, want)
		}
	}
}
