package fetchtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// selfSigned is a freshly generated self-signed certificate valid for
// 127.0.0.1, ::1 and localhost.
type selfSigned struct {
	cert tls.Certificate
	pool *x509.CertPool
	pem  []byte
}

func newSelfSigned() (*selfSigned, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("fetchtest: serial: %w", err)
	}
	now := time.Now()
	return selfSign(&x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"fetchtest"}, CommonName: "fetchtest loopback"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * 365 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	})
}

// selfSign makes a new key and a self-signed CA server certificate from
// tmpl, which sets the names and validity.
func selfSign(tmpl *x509.Certificate) (*selfSigned, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("fetchtest: generate key: %w", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("fetchtest: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("fetchtest: parse certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &selfSigned{
		cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		pool: pool,
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}, nil
}

// serverConfig serves HTTP/1.1 only: one request at a time per connection
// keeps in-flight counting simple and matches what a forward proxy sees.
func (s *selfSigned) serverConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{s.cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
}
