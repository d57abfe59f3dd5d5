package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TCPServer is a redis-server on a TCP port of 127.0.0.1, with no
// persistence: for tests that need a network address (a TLS mismatch, a
// server that is not a Cluster node).
type TCPServer struct {
	Addr string // 127.0.0.1:port
	URL  string // redis://Addr
}

// StartTCP starts a plain redis-server for t and stops it when t ends.
func StartTCP(t testing.TB) *TCPServer {
	t.Helper()
	dir := t.TempDir()
	port := FreePort(t)
	startProcess(t, dir, "--port", strconv.Itoa(port), "--bind", "127.0.0.1")
	s := &TCPServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.URL = "redis://" + s.Addr
	waitListening(t, s.Addr)
	return s
}

// TLSServer is a redis-server that speaks only TLS, on a TCP port of
// 127.0.0.1, with a self-signed certificate for 127.0.0.1.
type TLSServer struct {
	Addr string // 127.0.0.1:port
	URL  string // rediss://Addr
	CA   string // the certificate's PEM file, to trust it
}

// StartTLS starts a TLS-only redis-server for t and stops it when t ends.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCert(t, cert, key)
	port := FreePort(t)
	startProcess(t, dir, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	s := &TLSServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), CA: cert}
	s.URL = "rediss://" + s.Addr
	waitListening(t, s.Addr)
	return s
}

// startProcess starts redis-server with args, no persistence and its log
// in dir, and kills it when t ends.
func startProcess(t testing.TB, dir string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redistest: redis-server is not installed (scripts/test.sh installs it): ", err)
	}
	args = append(args, "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	cmd := exec.Command(bin, args...)
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal("redistest: ", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal("redistest: ", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits, at most 10 seconds, until addr takes connections.
func waitListening(t testing.TB, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	err := poll(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: nothing listens on %s in 10s: %v", addr, err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t testing.TB, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}
