package cmd

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestRecordFlags: --record-headers takes a comma list of names (kept
// lower-case, once each) or all, and --record-hash turns the hash on;
// a name that is not a token is a usage error.
func TestRecordFlags(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		names   []string
		all     bool
		hash    bool
		wantErr string
	}{
		{name: "none", args: nil},
		{name: "names", args: []string{"--record-headers", "ETag, Set-Cookie,etag", "--record-hash"}, names: []string{"etag", "set-cookie"}, hash: true},
		{name: "all", args: []string{"--record-headers", "all"}, all: true},
		{name: "bad name", args: []string{"--record-headers", "etag,x y"}, wantErr: `bad header name "x y"`},
		{name: "empty", args: []string{"--record-headers", ""}, wantErr: "bad header name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := Test()
			var got *FetchOptions
			cmd := NewCmdFetch(ios, func(o *FetchOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if code := ExitCode(ios, err); code != ExitUsage {
					t.Errorf("exit code %d, want %d", code, ExitUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := got.Config
			if !reflect.DeepEqual(c.RecordHeaders, tt.names) || c.RecordAllHeaders != tt.all || c.RecordHash != tt.hash {
				t.Errorf("headers %q all %v hash %v, want %q %v %v", c.RecordHeaders, c.RecordAllHeaders, c.RecordHash, tt.names, tt.all, tt.hash)
			}
		})
	}
}
