package cmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// TestRun_noSecretsAnywhere runs the command with credentialed proxies (the
// right and a wrong password, HTTP and SOCKS5, in a list and by flag) and a
// target URL with user information, with the progress bar, summary,
// warnings, report and saved bodies all on, and checks that no user name or
// password appears in stdout, stderr, the report or the saved file names,
// on each transport (the fast one writes Proxy-Authorization itself).
func TestRun_noSecretsAnywhere(t *testing.T) {
	const (
		user     = "proxyuser-7c1"
		pass     = "proxypass-9d2"
		wrong    = "wrongpass-4e3"
		tgtUser  = "targetuser-5f4"
		tgtPass  = "targetpass-6a5"
		lineUser = "listuser-8b6"
	)
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	httpPx, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpPx.Close)
	socksPx, err := fetchtest.StartSOCKS5(fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs microsocks)", err)
	}
	t.Cleanup(socksPx.Close)
	withCreds := func(u, name, pw string) string {
		return strings.Replace(u, "://", "://"+name+":"+pw+"@", 1)
	}
	for _, tc := range []struct {
		name    string
		proxies []string
	}{
		{"right password", []string{withCreds(httpPx.URL, user, pass), withCreds(socksPx.URL, user, pass)}},
		{"wrong password", []string{withCreds(httpPx.URL, user, wrong), withCreds(socksPx.URL, user, wrong)}},
	} {
		for _, tp := range transports {
			t.Run(tc.name+"/"+tp, func(t *testing.T) {
				dir := t.TempDir()
				// The list repeats the first proxy, so a duplicate warning names it.
				list := writeFile(t, dir, "proxies.txt", tc.proxies[0]+"\n"+tc.proxies[0]+"\n")
				target := withCreds(tg.URL, tgtUser, tgtPass)
				urls := writeFile(t, dir, "urls.txt", target+"/a?size=10\n"+target+"/b?status=503\n"+
					"ftp://"+lineUser+":"+tgtPass+"@example.com/\n")
				report := filepath.Join(dir, "report.json")
				saved := filepath.Join(dir, "saved")
				ios, _, stdout, stderr := Test()
				ios.SetStderrTTY(true) // progress bar and summary too
				Run(context.Background(), ios, []string{"--transport", tp, "-p", list, "--proxy", tc.proxies[1], "--retries", "1",
					"--retry-backoff", "1ms", "--report", report, "--save-dir", saved, urls})
				rep, _ := os.ReadFile(report)
				var names []string
				entries, _ := os.ReadDir(saved)
				for _, e := range entries {
					names = append(names, e.Name())
				}
				everything := map[string]string{
					"stdout": stdout.String(), "stderr": stderr.String(), "report": string(rep),
					"file names": strings.Join(names, "\n"),
				}
				if !strings.Contains(stdout.String(), `"line":1`) {
					t.Fatalf("no records on stdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
				for where, text := range everything {
					for _, secret := range []string{user, pass, wrong, tgtUser, tgtPass, lineUser} {
						if strings.Contains(text, secret) {
							t.Errorf("%s shows %q:\n%s", where, secret, text)
						}
					}
				}
			})
		}
	}
}
