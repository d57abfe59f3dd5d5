package fetch_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// factsCert is a self-signed CA certificate for localhost and 127.0.0.1,
// with an issuer name of its own, and a pool that trusts it.
func factsCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(49),
		Subject:               pkix.Name{Organization: []string{"fetch facts"}, CommonName: "facts test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour).Truncate(time.Second),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// streams counts the requests in flight at a server, in all and on each
// connection (by the client's address), and what TLS the last one had.
type streams struct {
	mu      sync.Mutex
	now     int
	most    int
	perConn map[string]int
	mostOne int // most in flight on one connection
	tls     tls.ConnectionState
	proto   string
	// hold, when > 0, keeps each request until hold are in flight (or
	// one second has passed), so that more than hold at once would show.
	hold    int
	release chan struct{}
}

func (s *streams) handler(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	if s.perConn == nil {
		s.perConn = map[string]int{}
	}
	s.perConn[r.RemoteAddr]++
	s.mostOne = max(s.mostOne, s.perConn[r.RemoteAddr])
	if r.TLS != nil {
		s.tls = *r.TLS
	}
	s.proto = r.Proto
	var wait chan struct{}
	if s.hold > 0 {
		if s.release == nil {
			s.release = make(chan struct{})
		}
		wait = s.release
		if s.now >= s.hold {
			close(s.release)
			s.release = nil
		}
	}
	s.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(time.Second): // a run whose limit keeps fewer in flight: the last ones
		case <-r.Context().Done():
		}
	}
	body := "hello " + r.URL.Path
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write([]byte(body))
	s.mu.Lock()
	s.now--
	s.perConn[r.RemoteAddr]--
	s.mu.Unlock()
}

// startTLSTarget starts an https target on 127.0.0.1 with cert, serving
// HTTP/2 when h2.
func startTLSTarget(t *testing.T, cert tls.Certificate, h2 bool, s *streams) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.handler))
	srv.EnableHTTP2 = h2
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// viaProxy is how a test reaches its target: direct, through fetchtest's
// Go proxy (plain, or over TLS: an https proxy), squid, or a SOCKS5
// proxy (microsocks).
func viaProxy(t *testing.T, via string) (proxy *fetchtest.Proxy, list []proxies.Proxy) {
	t.Helper()
	switch via {
	case "direct":
		return nil, nil
	case "squid":
		sq, err := fetchtest.StartSquid(t.TempDir())
		if err != nil {
			t.Fatalf("%v (scripts/test.sh installs squid)", err)
		}
		t.Cleanup(sq.Close)
		proxy = sq
	case "socks5":
		proxy = startProxy(t, "socks5", fetchtest.ProxyOptions{})
	case "httpsproxy":
		proxy = startProxy(t, "http", fetchtest.ProxyOptions{TLS: true})
	default:
		proxy = startProxy(t, "http", fetchtest.ProxyOptions{})
	}
	return proxy, []proxies.Proxy{proxyOf(t, proxy.URL, nil)}
}

// TestFactsHTTPS: an https target that offers HTTP/2 is fetched over
// HTTP/2, direct, through CONNECT tunnels (fetchtest's Go proxy, plain
// and https, squid) and through SOCKS5, on both transports, and the
// record's tls facts are those of the connection the server saw and of
// its certificate; one that offers HTTP/1.1 only is fetched over it, with
// ALPN http/1.1. remote_addr is the target's direct and the proxy's when
// proxied.
func TestFactsHTTPS(t *testing.T) {
	cert, pool := factsCert(t)
	for _, h2 := range []bool{true, false} {
		for _, via := range []string{"direct", "goproxy", "squid", "httpsproxy", "socks5"} {
			for _, tr := range []fetch.Transport{fetch.TransportFast, fetch.TransportStd} {
				t.Run(fmt.Sprintf("h2=%v/%s/%s", h2, via, tr), func(t *testing.T) {
					s := &streams{}
					srv := startTLSTarget(t, cert, h2, s)
					px, list := viaProxy(t, via)
					cfg := fetch.DefaultConfig()
					cfg.RootCAs, cfg.Proxies, cfg.Transport = pool, list, tr
					if px != nil && px.CertPool != nil {
						roots := pool.Clone()
						roots.AppendCertsFromPEM(px.CertPEM)
						cfg.RootCAs = roots
					}
					_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
					u := "https://localhost:" + port + "/x"
					recs, _ := run(t, cfg, u)
					r := recs[1]
					if !r.OK {
						t.Fatalf("%+v", r.Error)
					}
					wantProto, wantALPN := "HTTP/2.0", "h2"
					if !h2 {
						wantProto, wantALPN = "HTTP/1.1", "http/1.1"
					}
					if r.Proto != wantProto || s.proto != wantProto {
						t.Errorf("proto %q, server saw %q, want %q", r.Proto, s.proto, wantProto)
					}
					wantAddr := srv.Listener.Addr().String()
					if px != nil {
						wantAddr = px.Addr
					}
					if r.RemoteAddr != wantAddr {
						t.Errorf("remote_addr %q, want %q", r.RemoteAddr, wantAddr)
					}
					leaf := cert.Leaf
					want := results.TLS{
						Version:      map[uint16]string{tls.VersionTLS12: "TLS1.2", tls.VersionTLS13: "TLS1.3"}[s.tls.Version],
						Cipher:       tls.CipherSuiteName(s.tls.CipherSuite),
						ALPN:         wantALPN,
						ServerName:   "localhost",
						CertNotAfter: leaf.NotAfter.UTC().Format(time.RFC3339),
						CertIssuer:   "CN=facts test CA,O=fetch facts",
					}
					if r.TLS == nil || *r.TLS != want {
						t.Errorf("tls %+v, want %+v", r.TLS, want)
					}
					if s.tls.NegotiatedProtocol != wantALPN || s.tls.ServerName != "localhost" {
						t.Errorf("the server saw alpn %q, server name %q", s.tls.NegotiatedProtocol, s.tls.ServerName)
					}
					if r.FinalURL != u || r.ContentType != "text/plain; charset=utf-8" || r.ContentLength != "8" || r.Bytes != 8 {
						t.Errorf("final_url %q content_type %q content_length %q bytes %d", r.FinalURL, r.ContentType, r.ContentLength, r.Bytes)
					}
				})
			}
		}
	}
}

// TestFactsRedirects: a chain of 301, 302 (to another host) and 307 is
// listed hop by hop, user information removed from every URL and from
// final_url; the plain answer's facts are those of the last hop.
func TestFactsRedirects(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/c":
			http.Redirect(w, r, "/d", http.StatusTemporaryRedirect)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("done"))
		}
	}))
	t.Cleanup(other.Close)
	otherHost := strings.TrimPrefix(other.URL, "http://")
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/b", http.StatusMovedPermanently)
		default:
			http.Redirect(w, r, "http://carol:pw2@"+otherHost+"/c", http.StatusFound)
		}
	}))
	t.Cleanup(first.Close)
	for _, tr := range []fetch.Transport{fetch.TransportFast, fetch.TransportStd} {
		t.Run(tr.String(), func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Transport = tr
			host := strings.TrimPrefix(first.URL, "http://")
			recs, _ := run(t, cfg, "http://alice:secret@"+host+"/a")
			r := recs[1]
			if !r.OK {
				t.Fatalf("%+v", r.Error)
			}
			want := []results.Redirect{
				{Status: 301, URL: "http://" + host + "/b"},
				{Status: 302, URL: "http://" + otherHost + "/c"},
				{Status: 307, URL: "http://" + otherHost + "/d"},
			}
			if fmt.Sprint(r.Redirects) != fmt.Sprint(want) {
				t.Errorf("redirects %v, want %v", r.Redirects, want)
			}
			if r.URL != "http://"+host+"/a" || r.FinalURL != "http://"+otherHost+"/d" {
				t.Errorf("url %q final_url %q", r.URL, r.FinalURL)
			}
			if r.RemoteAddr != otherHost || r.ContentType != "text/html" || r.ContentLength != "4" || r.Proto != "HTTP/1.1" {
				t.Errorf("remote_addr %q content_type %q content_length %q proto %q", r.RemoteAddr, r.ContentType, r.ContentLength, r.Proto)
			}
		})
	}
}

// TestFactsHeadersAndHash: --record-headers copies the headers named (in
// any case; multi-valued ones with all their values) or all of them,
// lower-case, within 16 KiB: past it the values that do not fit are left
// out and their names listed under ":truncated". --record-hash is the
// SHA-256 of the body served. Direct and through a proxy (whose address
// is remote_addr), on both transports; with neither flag a record has
// neither.
func TestFactsHeadersAndHash(t *testing.T) {
	body := []byte(strings.Repeat("0123456789abcdef", 1000))
	sum := sha256.Sum256(body)
	big := strings.Repeat("b", 10<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("ETag", `"v1"`)
		if r.URL.Path == "/big" {
			h.Add("X-Big", big)
			h.Add("X-Big", big) // does not fit after the first
			h.Set("X-Later", "z")
		}
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	for _, via := range []string{"direct", "goproxy"} {
		for _, tr := range []fetch.Transport{fetch.TransportFast, fetch.TransportStd} {
			t.Run(via+"/"+tr.String(), func(t *testing.T) {
				px, list := viaProxy(t, via)
				wantAddr := strings.TrimPrefix(srv.URL, "http://")
				if px != nil {
					wantAddr = px.Addr
				}
				base := func() fetch.Config {
					cfg := fetch.DefaultConfig()
					cfg.Transport, cfg.Proxies = tr, list
					return cfg
				}
				cfg := base()
				recs, _ := run(t, cfg, srv.URL+"/plain")
				r := recs[1]
				if r.Headers != nil || r.SHA256 != "" || r.RemoteAddr != wantAddr || string(r.ContentLength) != strconv.Itoa(len(body)) {
					t.Errorf("no flags: headers %v sha256 %q remote_addr %q content_length %q", r.Headers, r.SHA256, r.RemoteAddr, r.ContentLength)
				}

				cfg = base()
				cfg.RecordHeaders, cfg.RecordHash = []string{"set-cookie", "ETAG", "x-missing"}, true
				recs, _ = run(t, cfg, srv.URL+"/named")
				r = recs[1]
				want := results.Headers{"set-cookie": {"a=1", "b=2"}, "etag": {`"v1"`}}
				if fmt.Sprint(r.Headers) != fmt.Sprint(want) {
					t.Errorf("named: headers %v, want %v", r.Headers, want)
				}
				if r.SHA256 != hex.EncodeToString(sum[:]) {
					t.Errorf("sha256 %s, want %x", r.SHA256, sum)
				}

				cfg = base()
				cfg.RecordAllHeaders = true
				recs, _ = run(t, cfg, srv.URL+"/big")
				r = recs[1]
				h := r.Headers
				if len(h["x-big"]) != 1 || h["x-big"][0] != big || fmt.Sprint(h["set-cookie"]) != "[a=1 b=2]" ||
					h["content-type"][0] != "application/octet-stream" || h["date"] == nil {
					t.Errorf("all: headers %v", h)
				}
				// Sorted: content-length content-type date etag set-cookie
				// x-big (one of two fits, and the cut is there) x-later
				// (after the cut: left out).
				if fmt.Sprint(h[fetch.TruncatedHeaders]) != "[x-big x-later]" || h["x-later"] != nil {
					t.Errorf("all: cut %v, x-later %v", h[fetch.TruncatedHeaders], h["x-later"])
				}
				size := 0
				for k, vs := range h {
					for _, v := range vs {
						if k != fetch.TruncatedHeaders {
							size += len(k) + len(v)
						}
					}
				}
				if size > fetch.MaxRecordedHeaders {
					t.Errorf("%d bytes of headers", size)
				}
				if r.SHA256 != "" {
					t.Errorf("sha256 %q without --record-hash", r.SHA256)
				}
			})
		}
	}
}
