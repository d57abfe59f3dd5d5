package cmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestResume_takesCoordinatorAgain: --resume fetches again the lines whose
// records all failed with kind coordinator (Redis could not be reached, a
// lease was lost) or cancelled, as fetch writes them and as any other JSON
// writer might, and skips the lines that have a final record. After it,
// every line of the list ends with exactly one ok record: the run
// after Redis came back took nothing and left its coordinator lines failed.
func TestResume_takesCoordinatorAgain(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	dir := t.TempDir()
	const n = 10
	uri := func(line int) string { return fmt.Sprintf("/c/%d?size=1", line) }
	var list strings.Builder
	for line := 1; line <= n; line++ {
		list.WriteString(target.URL + uri(line) + "\n")
	}
	urls := writeFile(t, dir, "urls.txt", list.String())

	ok := `{"url":%q,"input":%q,"line":%d,"ok":true,"status":200,"attempts":1,"error":null}` + "\n"
	coordQueue := `{"url":%q,"input":%q,"line":%d,"ok":false,"attempts":0,"error":{"phase":"queue","kind":"coordinator","message":"redis unreachable"}}` + "\n"
	coordLease := `{"url":%q,"input":%q,"line":%d,"ok":false,"attempts":1,"error":{"phase":"body","kind":"coordinator","message":"lease lost"}}` + "\n"
	coordOther := `{"line":%[3]d,"input":%[2]q,"url":%[1]q,"error":{"kind":"coordinator","phase":"queue"},"ok":false}` + "\n" // not fetch's layout
	cancelled := `{"url":%q,"input":%q,"line":%d,"ok":false,"attempts":0,"error":{"phase":"queue","kind":"cancelled","message":"interrupted"}}` + "\n"
	previous := []struct {
		line    int
		records []string
		again   bool // fetched again by the resume
	}{
		{1, []string{ok}, false},
		{2, []string{coordQueue, ok}, false}, // resumed once already
		{3, []string{coordQueue}, true},
		{4, []string{coordLease}, true},
		{5, []string{coordOther}, true},
		{6, []string{coordQueue, coordLease}, true},
		{7, []string{cancelled}, true},
		{8, []string{coordQueue, cancelled}, true},
		{9, []string{cancelled, coordLease}, true},
		{10, nil, true}, // no record yet
	}
	var out strings.Builder
	wantSkipped := 0
	for _, p := range previous {
		for _, r := range p.records {
			fmt.Fprintf(&out, r, target.URL+uri(p.line), urls, p.line)
		}
		if !p.again {
			wantSkipped++
		}
	}
	outPath := writeFile(t, dir, "out.jsonl", out.String())

	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"--resume", "-o", outPath, urls}); code != ExitOK {
		t.Fatalf("resume: exit %d; stderr:\n%s", code, stderr)
	}
	for _, p := range previous {
		want := 0
		if p.again {
			want = 1
		}
		if got := target.Hits(uri(p.line)); got != want {
			t.Errorf("line %d (records before: %d): fetched %d times by the resume, want %d", p.line, len(p.records), got, want)
		}
	}
	data, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), out.String()) {
		t.Errorf("the resume changed the records already in %s", filepath.Base(outPath))
	}
	okByLine := map[int]int{}
	for _, r := range readRecords(t, data) {
		if r.OK {
			okByLine[r.Line]++
		} else if r.Error == nil || (r.Error.Kind != results.KindCoordinator && r.Error.Kind != results.KindCancelled) {
			t.Errorf("line %d: a failed record of kind %+v", r.Line, r.Error)
		}
	}
	for line := 1; line <= n; line++ {
		if okByLine[line] != 1 {
			t.Errorf("line %d has %d ok records, want 1", line, okByLine[line])
		}
	}
	if want := fmt.Sprintf("skipped %d lines", wantSkipped); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
}
