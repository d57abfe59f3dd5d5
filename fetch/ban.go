package fetch

import (
	"bytes"
	"io"
	"net/http"

	"github.com/fetch-dev/fetch/fetch/results"
)

// ban is a response found to be a ban: where it was seen and why.
type ban struct {
	phase string // headers or body
	why   string
}

// checkBan tells whether resp, whose body is being read from body, is a
// ban: its status is in --ban-status, or --ban-match matches its status
// line and headers or, failing those, the first --ban-scan bytes of its
// body. It returns the start of the body it read to find out (to be read
// again before the rest of body), and the error of that read, if any.
func (e *Engine) checkBan(resp *http.Response, body io.Reader) (*ban, []byte, error) {
	if e.cfg.bannedStatus(resp.StatusCode) {
		return &ban{results.PhaseHeaders, resp.Status + ": banned (--ban-status)"}, nil, nil
	}
	re := e.cfg.BanMatch
	if re == nil {
		return nil, nil, nil
	}
	var head bytes.Buffer
	head.WriteString(resp.Proto + " " + resp.Status + "\r\n")
	resp.Header.Write(&head)
	if re.Match(head.Bytes()) {
		return &ban{results.PhaseHeaders, resp.Status + ": banned (--ban-match in the status line or headers)"}, nil, nil
	}
	scan := e.cfg.BanScan
	if scan <= 0 {
		scan = DefaultBanScan
	}
	start, err := io.ReadAll(io.LimitReader(body, scan))
	if err != nil {
		return nil, start, err
	}
	if re.Match(start) {
		return &ban{results.PhaseBody, resp.Status + ": banned (--ban-match in the body)"}, start, nil
	}
	return nil, start, nil
}
