//go:build e2enode

package k8se2e

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is a throw-away certificate authority in a directory: every
// certificate a test node or control plane uses is issued by it.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
}

// newPKI makes a CA and writes it to dir/ca.crt.
func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := certTemplate("cdi-e2e-ca", nil)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, cert: cert, key: key}
	return p, writePEM(p.CA(), "CERTIFICATE", der)
}

// CA is the path of the CA certificate.
func (p *pki) CA() string { return filepath.Join(p.dir, "ca.crt") }

// pool is the CA as a certificate pool, for clients.
func (p *pki) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.cert)
	return pool
}

// issue writes name.crt and name.key, a certificate for the common name
// cn in the organizations orgs. Server certificates (ips given) are valid
// for those addresses and the DNS names; the others are client
// certificates.
func (p *pki) issue(name, cn string, orgs []string, ips []net.IP, dns ...string) (crt, key string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := certTemplate(cn, orgs)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if len(ips) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses, tmpl.DNSNames = ips, dns
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, k.Public(), p.key)
	if err != nil {
		return "", "", err
	}
	crt, key = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := writePEM(crt, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return crt, key, writeKey(key, k)
}

// signingKey writes a key pair for service account tokens: name.key and
// name.pub.
func (p *pki) signingKey(name string) (priv, pub string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return "", "", err
	}
	priv, pub = filepath.Join(p.dir, name+".key"), filepath.Join(p.dir, name+".pub")
	if err := writePEM(pub, "PUBLIC KEY", der); err != nil {
		return "", "", err
	}
	return priv, pub, writeKey(priv, k)
}

func certTemplate(cn string, orgs []string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
	}
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
