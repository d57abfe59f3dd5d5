package input

// Raw is a line as a Scanner read it, to be handed to another process (the
// shared work queue) and parsed there as the Scanner would have parsed it:
// its input's name and line number, and the text kept (a long line's start
// only, with Long set). Text is valid until the Scanner's next Scan.
type Raw struct {
	Input  string
	Number int
	Text   []byte
	Long   bool // longer than the Scanner keeps: only its start is in Text
	// AtPastKept: a long line holds an "@" past its kept start, so the
	// start may hold user information cut short (see longShown).
	AtPastKept bool
}

// Raw returns the line Scan stopped at as read.
func (s *Scanner) Raw() Raw {
	return Raw{Input: s.in.Name, Number: s.n, Text: s.raw.kept, Long: s.long, AtPastKept: s.raw.atPastKept}
}

// Parse returns the Line the Scanner makes of r, JSON request lines'
// bodies at most maxBody bytes (DefaultMaxRequestBody when maxBody < 1).
// It returns nil for a blank or comment line, which a Scanner never stops
// at.
func (r Raw) Parse(maxBody int64) *Line {
	if maxBody < 1 {
		maxBody = DefaultMaxRequestBody
	}
	return parseLine(r.Input, r.Number, rawLine{kept: r.Text, atPastKept: r.AtPastKept}, r.Long, firstNonSpace(r.Text), maxBody)
}
