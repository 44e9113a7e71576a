package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Role is what a peer's certificate says it is.
type Role string

const (
	// RoleNone is a plaintext peer, or a certificate with none (or more than
	// one) of the role names below.
	RoleNone Role = ""
	// RoleServer is DNS SAN server.<region>.claimd.
	RoleServer Role = "server"
	// RoleClient is DNS SAN client.<region>.claimd.
	RoleClient Role = "client"
	// RoleCLI is DNS SAN cli.<region>.claimd.
	RoleCLI Role = "cli"
)

// DefaultRegion is the region of a Config or certificate that names none.
const DefaultRegion = "global"

// roles are the roles a certificate can carry, in no order of privilege:
// PeerRole never ranks them (see the package doc).
var roles = []Role{RoleServer, RoleClient, RoleCLI}

// Name returns the certificate name of a role in a region:
// "server.global.claimd".
func Name(role Role, region string) string {
	return string(role) + "." + region + ".claimd"
}

// PeerRole reads the role from a completed handshake's peer certificate,
// matching only names of this region. A certificate with more than one role
// name is RoleNone: it is a mis-issued certificate or an attempt to pass as
// a server, and either way granting a role would hide it.
//
// PeerRole does not verify the certificate; it trusts that the handshake
// did. Every tls.Config from this package verifies the chain (the outgoing
// one in VerifyConnection, so cs.VerifiedChains is empty there), so call it
// only on connections made with them.
func PeerRole(cs tls.ConnectionState, region string) Role {
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return RoleNone
	}
	if region == "" {
		region = DefaultRegion
	}
	found := RoleNone
	for _, r := range roles {
		want := Name(r, region)
		for _, n := range cs.PeerCertificates[0].DNSNames {
			if !strings.EqualFold(n, want) {
				continue
			}
			if found != RoleNone && found != r {
				return RoleNone
			}
			found = r
		}
	}
	return found
}

// Config names the TLS files of an agent. The zero Config is plaintext.
type Config struct {
	CAFile, CertFile, KeyFile string
	// VerifyServerHostname: outgoing connections require the peer's
	// certificate to carry server.<region>.claimd, not just any certificate
	// signed by the CA.
	VerifyServerHostname bool
	// Region selects the role names that count; "" is DefaultRegion.
	Region string
}

// Enabled reports whether any TLS file is set.
func (c Config) Enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// Validate checks that an enabled Config names all three files, and that
// the region can be part of a DNS name. A disabled Config is valid.
func (c Config) Validate() error {
	if err := validRegion(c.Region); err != nil {
		return err
	}
	if !c.Enabled() {
		return nil
	}
	var missing []string
	for _, f := range []struct{ flag, val string }{
		{"-tls-ca-file", c.CAFile}, {"-tls-cert-file", c.CertFile}, {"-tls-key-file", c.KeyFile},
	} {
		if f.val == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tls: %s required: TLS needs -tls-ca-file, -tls-cert-file and -tls-key-file together",
			strings.Join(missing, " and "))
	}
	return nil
}

// validRegion accepts "" (the default) or one lowercase DNS label, so that
// Name(role, region) is a DNS name and exactly one region matches it.
func validRegion(region string) error {
	if region == "" {
		return nil
	}
	ok := len(region) <= 63 && region[0] != '-' && region[len(region)-1] != '-'
	for _, r := range region {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("tls: region %q: must be lowercase letters, digits and '-'", region)
	}
	return nil
}

func regionOrDefault(region string) string {
	if region == "" {
		return DefaultRegion
	}
	return region
}

// Configurator holds the CA pool and this agent's certificate, and reloads
// them. Safe for concurrent use: handshakes read the current set through an
// atomic pointer, so Reload never drops existing connections and new
// connections use the new files.
type Configurator struct {
	config Config
	region string

	// reloadMu serialises Reload so two reloads racing cannot store an
	// older read after a newer one. Handshakes never take it.
	reloadMu sync.Mutex
	current  atomic.Pointer[loaded]
}

// loaded is one consistent set of files: the pool and key pair are always
// swapped together.
type loaded struct {
	pool *x509.CertPool
	cert *tls.Certificate
}

// NewConfigurator loads and checks the files of an enabled Config. Errors
// name the file and the problem, never key material.
func NewConfigurator(c Config) (*Configurator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return nil, errors.New("tls: no TLS files configured")
	}
	cfg := &Configurator{config: c, region: regionOrDefault(c.Region)}
	l, err := load(c)
	if err != nil {
		return nil, err
	}
	cfg.current.Store(l)
	return cfg, nil
}

// Reload re-reads the CA, certificate and key. On any error it keeps the
// old ones and returns the error.
func (c *Configurator) Reload() error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	l, err := load(c.config)
	if err != nil {
		return err
	}
	c.current.Store(l)
	return nil
}

// Region is the region whose role names this agent uses.
func (c *Configurator) Region() string { return c.region }

// Certificate returns the current certificate, parsed. It is for logging
// and status (serial, expiry), not for handshakes.
func (c *Configurator) Certificate() *x509.Certificate { return c.current.Load().cert.Leaf }

// IncomingConfig is for the server side of a connection: TLS 1.3 only, and a
// client certificate that chains to the CA is required. The CA pool and
// certificate are read at each handshake, so a Reload applies to the next
// connection.
func (c *Configurator) IncomingConfig() *tls.Config {
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return c.current.Load().cert, nil
	}
	// A server-side config cannot take its ClientCAs from a callback, so
	// GetConfigForClient hands each handshake a config with the pool that
	// is current then.
	perConn := func(pool *x509.CertPool) *tls.Config {
		return &tls.Config{
			MinVersion:     tls.VersionTLS13,
			ClientAuth:     tls.RequireAndVerifyClientCert,
			ClientCAs:      pool,
			GetCertificate: getCert,
			// A resumed session is not checked against the pool again, so
			// it would outlive a CA rotation. claimd's connections are few
			// and long-lived; a full handshake each costs nothing that
			// matters.
			SessionTicketsDisabled: true,
		}
	}
	cfg := perConn(c.current.Load().pool)
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return perConn(c.current.Load().pool), nil
	}
	return cfg
}

// OutgoingConfig is for dialling a server: TLS 1.3 only, this agent's
// certificate presented, and the server's chain verified against the CA
// pool current at handshake time. With VerifyServerHostname the server's
// certificate must also carry Name(RoleServer, region).
//
// crypto/tls reads a client's RootCAs once, from the config, so a reloaded
// pool could only reach it through a new config. Instead, verification is
// done in VerifyConnection with the current pool, and InsecureSkipVerify
// turns off only the built-in check that this one replaces. The server name
// checked is Name(RoleServer, region) whatever ServerName a caller sets, so
// a dialler setting ServerName to a host name cannot weaken it.
func (c *Configurator) OutgoingConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: Name(RoleServer, c.region),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.current.Load().cert, nil
		},
		InsecureSkipVerify: true,
		VerifyConnection:   c.verifyServer,
	}
}

// verifyServer is the outgoing chain (and, on request, name) check.
func (c *Configurator) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: server presented no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         c.current.Load().pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, ic := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(ic)
	}
	if c.config.VerifyServerHostname {
		opts.DNSName = Name(RoleServer, c.region)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	return nil
}

// ClientConfigFromFiles builds an outgoing config for the CLI and api
// package: caFile (-ca-cert) is required; certFile and keyFile (-client-cert,
// -client-key) are optional but go together. The server must carry Name(RoleServer, region). The CLI is
// short-lived, so this config is a plain snapshot with no reloading.
func ClientConfigFromFiles(caFile, certFile, keyFile, region string) (*tls.Config, error) {
	if err := validRegion(region); err != nil {
		return nil, err
	}
	if caFile == "" {
		return nil, errors.New("tls: -ca-cert is required to verify the server")
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: -client-cert and -client-key go together: set both or neither")
	}
	ca := namedFile{"ca-cert", caFile}
	pool, err := loadPool(ca)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		ServerName: Name(RoleServer, regionOrDefault(region)),
	}
	if certFile != "" {
		cert, err := loadKeyPair(namedFile{"client-cert", certFile}, namedFile{"client-key", keyFile}, ca, pool)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg, nil
}

// load reads and checks one complete set of an agent's files.
func load(c Config) (*loaded, error) {
	ca := namedFile{"tls-ca-file", c.CAFile}
	pool, err := loadPool(ca)
	if err != nil {
		return nil, err
	}
	cert, err := loadKeyPair(namedFile{"tls-cert-file", c.CertFile}, namedFile{"tls-key-file", c.KeyFile}, ca, pool)
	if err != nil {
		return nil, err
	}
	return &loaded{pool: pool, cert: cert}, nil
}

// namedFile is a file and the flag that named it, so that every error says
// which setting to fix: "tls-cert-file /etc/claimd/server.pem: ...".
type namedFile struct{ flag, path string }

func (f namedFile) String() string { return f.flag + " " + f.path }

// loadPool reads every CA certificate in a PEM file. Several are allowed so
// that a CA can be rotated: trust old and new, reissue, then drop the old.
func loadPool(f namedFile) (*x509.CertPool, error) {
	certs, err := readCerts(f)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("%s: certificate %q is not a CA", f, c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	return pool, nil
}

// loadKeyPair reads a certificate chain and its key, and checks that they
// match and that the certificate chains to pool now: a wrong or expired
// certificate is reported at start-up or Reload, naming the file, instead of
// as a peer's handshake failure later.
func loadKeyPair(certFile, keyFile, caFile namedFile, pool *x509.CertPool) (*tls.Certificate, error) {
	chain, err := readCerts(certFile)
	if err != nil {
		return nil, err
	}
	key, err := readKey(keyFile)
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("%s: key does not match certificate %s", keyFile, certFile.path)
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}
	for _, ic := range chain[1:] {
		opts.Intermediates.AddCert(ic)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("%s: checked against %s: %w", certFile, caFile, err)
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, nil
}

// readCerts parses every CERTIFICATE block of a PEM file, at least one.
func readCerts(f namedFile) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.flag, err) // the error names the path
	}
	var certs []*x509.Certificate
	sawKey := false
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if strings.Contains(b.Type, "PRIVATE KEY") {
			sawKey = true
			continue
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", f, len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		if sawKey {
			// Say so without echoing the block: the file holds a key.
			return nil, fmt.Errorf("%s: no certificate found (the file holds a private key; are the cert and key files swapped?)", f)
		}
		return nil, fmt.Errorf("%s: no certificate found", f)
	}
	return certs, nil
}

// readKey parses the first private key block of a PEM file: PKCS#8, SEC 1
// (EC) or PKCS#1 (RSA). Parse errors are not wrapped: their text could
// describe the key's bytes, and the file name is what the operator needs.
func readKey(f namedFile) (crypto.Signer, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.flag, err)
	}
	sawCert := false
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			sawCert = true
			continue
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		if k, ok := parseKey(b); ok {
			return k, nil
		}
		return nil, fmt.Errorf("%s: cannot parse the private key (PKCS#8, EC or RSA PEM expected, unencrypted)", f)
	}
	if sawCert {
		return nil, fmt.Errorf("%s: no private key found (the file holds a certificate; are the cert and key files swapped?)", f)
	}
	return nil, fmt.Errorf("%s: no private key found", f)
}

func parseKey(b *pem.Block) (crypto.Signer, bool) {
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		switch k := k.(type) {
		case *ecdsa.PrivateKey:
			return k, true
		case *rsa.PrivateKey:
			return k, true
		case ed25519.PrivateKey:
			return k, true
		}
		return nil, false
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, true
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, true
	}
	return nil, false
}
