package fetchtest_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

func startFaults(t *testing.T) *fetchtest.Faults {
	t.Helper()
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestFaults checks each fault at the socket level, as a client sees it.
func TestFaults(t *testing.T) {
	f := startFaults(t)

	t.Run("blackhole connect hangs", func(t *testing.T) {
		if !f.BlackholeHangs {
			t.Skip("this kernel answers connects to a full accept queue")
		}
		start := time.Now()
		c, err := net.DialTimeout("tcp", f.Blackhole, 200*time.Millisecond)
		if err == nil {
			c.Close()
			t.Fatal("connect to the blackhole succeeded")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("connect error %v, want a timeout", err)
		}
		if el := time.Since(start); el < 200*time.Millisecond {
			t.Errorf("gave up after %s, before the dial timeout", el)
		}
	})

	t.Run("refused", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", f.Refused, time.Second)
		if err == nil {
			c.Close()
			t.Fatal("connect to the refused port succeeded")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("error %v, want connection refused", err)
		}
	})

	t.Run("silent never writes", func(t *testing.T) {
		c, err := net.Dial("tcp", f.Silent)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read %d bytes, error %v; want nothing until the deadline", n, err)
		}
	})

	t.Run("tls handshake never finishes", func(t *testing.T) {
		c, err := net.Dial("tcp", f.Silent)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(150 * time.Millisecond))
		err = tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("handshake error %v, want a timeout", err)
		}
	})

	t.Run("bad certificate", func(t *testing.T) {
		c, err := tls.Dial("tcp", strings.TrimPrefix(f.BadCertURL, "https://"), &tls.Config{ServerName: "127.0.0.1"})
		if err == nil {
			c.Close()
			t.Fatal("handshake with the bad certificate succeeded")
		}
		var ve *tls.CertificateVerificationError
		if !errors.As(err, &ve) {
			t.Errorf("error %v, want a certificate verification error", err)
		}
	})

	for _, u := range []string{f.URL, f.TLSURL} {
		t.Run("reset mid-body "+u[:strings.Index(u, ":")], func(t *testing.T) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.CertPool}}}
			defer c.CloseIdleConnections()
			resp, err := c.Get(u + "/reset?size=1000&after=300")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if len(b) != 300 {
				t.Errorf("read %d bytes before the reset, want 300", len(b))
			}
			// Over TLS a reset can surface as a reset or as a cut record.
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %v, want a reset", err)
			}
		})
	}

	t.Run("proxy 403 to CONNECT", func(t *testing.T) {
		status := connect(t, f.Proxy403)
		if !strings.HasPrefix(status, "HTTP/1.1 403") {
			t.Errorf("CONNECT answered %q", status)
		}
	})

	t.Run("proxy closes after CONNECT", func(t *testing.T) {
		c, err := net.Dial("tcp", f.ProxyClose)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("tunnel read %d bytes, %v; want EOF", n, err)
		}
	})
}

// connect sends a CONNECT to the proxy at addr and returns its status line.
func connect(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func TestFaultsCloseLeavesNoGoroutines(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	// Leave connections open on the servers that hold them.
	var conns []net.Conn
	for _, a := range []string{f.Silent, strings.TrimPrefix(f.URL, "http://"), f.ProxyClose} {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	f.Close()
	f.Close()
	for _, c := range conns {
		c.Close()
	}
	goleak.VerifyNone(t, opt)
}
