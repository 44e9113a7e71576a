package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"
)

// backdate is how far before now a new certificate becomes valid. Agents'
// clocks differ by a little; without it a certificate issued on a machine
// running ahead is "not yet valid" on the others for that long.
const backdate = time.Minute

// CA is a certificate authority that can sign agent and CLI certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// GenerateCA makes a self-signed ECDSA P-256 CA valid for days days. It
// may sign only leaf certificates (MaxPathLenZero): claimd has no use for
// intermediates, and a leaked leaf key then cannot mint a sub-CA.
func GenerateCA(days int) (*CA, error) {
	if days <= 0 {
		return nil, fmt.Errorf("tls: CA validity must be a positive number of days, not %d", days)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name tells two CAs apart in a file or a log.
		Subject:               pkix.Name{CommonName: "claimd CA " + serial.Text(16)},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(time.Duration(days) * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tls: create CA certificate: %w", err)
	}
	return newCA(der, key)
}

// LoadCA reads a CA certificate and its ECDSA key, as written by
// `claimd tls ca create`.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certs, err := readCerts(namedFile{"ca", certFile})
	if err != nil {
		return nil, err
	}
	if !certs[0].IsCA {
		return nil, fmt.Errorf("ca %s: certificate %q is not a CA", certFile, certs[0].Subject.CommonName)
	}
	signer, err := readKey(namedFile{"ca-key", keyFile})
	if err != nil {
		return nil, err
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ca-key %s: not an ECDSA key", keyFile)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, fmt.Errorf("ca-key %s: key does not match certificate %s", keyFile, certFile)
	}
	return newCA(certs[0].Raw, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tls: parse CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// CertRequest describes a certificate for GenerateCert.
type CertRequest struct {
	Role   Role
	Region string // "" is DefaultRegion
	Days   int
	// DNSNames and IPAddresses are added to the defaults: the ones peers
	// dial this agent by, when they check them.
	DNSNames    []string
	IPAddresses []net.IP
}

// GenerateCert signs an ECDSA P-256 certificate for a role. DNS SANs are
// Name(role, region), "localhost" for servers and clients, then
// req.DNSNames; IP SANs are 127.0.0.1 for servers and clients, then
// req.IPAddresses. It is usable as both server and client (ExtKeyUsage
// ServerAuth and ClientAuth), since agents are both ends of connections.
// It returns the certificate PEM and the PKCS#8 key PEM. A certificate never
// outlives its CA: NotAfter is cut to the CA's.
func GenerateCert(ca *CA, req CertRequest) (certPEM, keyPEM []byte, err error) {
	now := time.Now()
	return generateCert(ca, req, now.Add(-backdate), now.Add(time.Duration(req.Days)*24*time.Hour))
}

// generateCert is GenerateCert with the validity window given, so that
// tests can make expired certificates.
func generateCert(ca *CA, req CertRequest, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, nil, errors.New("tls: no CA to sign with")
	}
	if !slices.Contains(roles, req.Role) {
		return nil, nil, fmt.Errorf("tls: role %q: must be server, client or cli", req.Role)
	}
	if req.Days <= 0 {
		return nil, nil, fmt.Errorf("tls: certificate validity must be a positive number of days, not %d", req.Days)
	}
	if err := validRegion(req.Region); err != nil {
		return nil, nil, err
	}
	name := Name(req.Role, regionOrDefault(req.Region))
	dns := []string{name}
	var ips []net.IP
	if req.Role == RoleServer || req.Role == RoleClient {
		dns = append(dns, "localhost")
		ips = append(ips, net.IPv4(127, 0, 0, 1))
	}
	for _, n := range req.DNSNames {
		if isRoleName(n) {
			// PeerRole would read the certificate as ambiguous: RoleNone.
			return nil, nil, fmt.Errorf("tls: additional DNS name %q is a role name; a certificate carries exactly one role", n)
		}
		if !slices.Contains(dns, n) {
			dns = append(dns, n)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: sign certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// isRoleName reports whether a DNS name has the shape of a role name in any
// region.
func isRoleName(n string) bool {
	n = strings.ToLower(n)
	for _, r := range roles {
		if strings.HasPrefix(n, string(r)+".") && strings.HasSuffix(n, ".claimd") {
			return true
		}
	}
	return false
}

// randomSerial is 128 random bits, as RFC 5280 allows up to 20 octets and
// CAs use to make serials unguessable.
func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("tls: generate serial: %w", err)
	}
	return s, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tls: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
