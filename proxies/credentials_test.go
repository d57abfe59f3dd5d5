package proxies_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/proxies"
)

// TestCredentials: Credentials give back each proxy's user information as
// its URL had it (a password, an empty one, none; an empty user name;
// bytes that are escaped in a URL), by the proxy's place in the list,
// whatever the proxies before it had, and session proxies' too.
func TestCredentials(t *testing.T) {
	list := strings.Join([]string{
		"http://alice:s3cret@p1.example:8080",
		"http://p2.example:8080",
		"socks5://bob@p3.example:1080",
		"http://carol:@p4.example:8080",
		"http://:only-pw@p5.example:8080",
		"https://d%40ve:p%3Aw%2F%20d@p6.example:443",
		"http://user-{session}:pw@gate.example:7000 sessions=3",
		"http://p7.example:8080",
		"http://%C3%BCn%C3%AF:c%C3%B6d%C3%A9@p8.example:8080",
	}, "\n")
	ps, err := proxies.Parse("list", strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 11 {
		t.Fatalf("%d proxies, want 11", len(ps))
	}
	c := proxies.NewCredentials(ps)
	if c.Len() != len(ps) {
		t.Fatalf("Len %d, want %d", c.Len(), len(ps))
	}
	for i, p := range ps {
		user, pass, passSet, ok := c.Get(i)
		if ok != (p.User != nil) || c.Has(i) != ok {
			t.Errorf("%d (%s): ok %v, Has %v; want %v", i, p.ID, ok, c.Has(i), p.User != nil)
			continue
		}
		ui := c.Userinfo(i)
		if p.User == nil {
			if user != "" || pass != "" || passSet || ui != nil {
				t.Errorf("%d (%s): %q %q %v %v, want nothing", i, p.ID, user, pass, passSet, ui)
			}
			continue
		}
		wantPass, wantSet := p.User.Password()
		if user != p.User.Username() || pass != wantPass || passSet != wantSet {
			t.Errorf("%d (%s): %q %q %v, want %q %q %v", i, p.ID, user, pass, passSet, p.User.Username(), wantPass, wantSet)
		}
		if ui.String() != p.User.String() {
			t.Errorf("%d (%s): Userinfo %q, want %q", i, p.ID, ui.String(), p.User.String())
		}
	}
	// Spot checks, so that a parse that changed would not pass unseen.
	for i, want := range map[int]*url.Userinfo{
		0:  url.UserPassword("alice", "s3cret"),
		2:  url.User("bob"),
		3:  url.UserPassword("carol", ""),
		5:  url.UserPassword("d@ve", "p:w/ d"),
		7:  url.UserPassword("user-2", "pw"),
		10: url.UserPassword("ünï", "cödé"),
	} {
		if got := c.Userinfo(i); got == nil || got.String() != want.String() {
			t.Errorf("%d: %v, want %v", i, got, want)
		}
	}
}

// TestCredentialsEmpty: a list without credentials, and no list.
func TestCredentialsEmpty(t *testing.T) {
	for _, ps := range [][]proxies.Proxy{nil, {proxies.FromURL(&url.URL{Scheme: "http", Host: "p:1"})}} {
		c := proxies.NewCredentials(ps)
		if c.Len() != len(ps) {
			t.Fatalf("Len %d, want %d", c.Len(), len(ps))
		}
		for i := range ps {
			if _, _, _, ok := c.Get(i); ok || c.Has(i) || c.Userinfo(i) != nil {
				t.Errorf("%d: credentials where there are none", i)
			}
		}
		if got := c.Redactor().String("x http://a:b@h/ y"); got != "x http://h/ y" {
			t.Errorf("Redactor: %q", got)
		}
	}
}
