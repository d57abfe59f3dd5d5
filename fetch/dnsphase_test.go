package fetch_test

import (
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestLookupFailsInPhaseDNS: a name that cannot be resolved fails in
// phase dns, kind dns, on both transports. "a..b" is not a domain name: Go's resolver refuses it without
// sending a query, so no traffic leaves loopback. Before, the attempt
// moved on to connect when the lookup ended, failed or not, and the record
// said phase connect.
func TestLookupFailsInPhaseDNS(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Transport = tr
			cfg.Retries = 0
			recs, _ := run(t, cfg, "http://a..b/x", "https://a..b/x")
			for line, rec := range recs {
				if rec.Error == nil || rec.Error.Phase != results.PhaseDNS || rec.Error.Kind != results.KindDNS {
					t.Errorf("line %d: error %+v, want phase dns, kind dns", line, rec.Error)
				}
				if _, ok := rec.Phases.Get(results.PhaseDNS); !ok {
					t.Errorf("line %d: phases %s have no dns", line, rec.Phases)
				}
			}
			if len(recs) != 2 {
				t.Errorf("%d records, want 2", len(recs))
			}
		})
	}
}
