package harness

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/tlsutil"
)

// PKI is a test certificate authority with one certificate per role, made
// with the same code as `claimd tls ca create` and `claimd tls cert create`.
type PKI struct {
	Dir    string
	CA     *tlsutil.CA
	CAFile string
	// Cert and key files by role.
	CertFile map[tlsutil.Role]string
	KeyFile  map[tlsutil.Role]string
}

// NewPKI writes a CA and a server, client and cli certificate (region
// global) in a temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsutil.GenerateCA(30)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: map[tlsutil.Role]string{}, KeyFile: map[tlsutil.Role]string{}}
	if err := os.WriteFile(p.CAFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, role := range []tlsutil.Role{tlsutil.RoleServer, tlsutil.RoleClient, tlsutil.RoleCLI} {
		p.CertFile[role], p.KeyFile[role] = p.Issue(t, role, string(role))
	}
	return p
}

// Issue signs a new certificate for role and writes it as name.pem and
// name-key.pem.
func (p *PKI) Issue(t testing.TB, role tlsutil.Role, name string) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM, err := tlsutil.GenerateCert(p.CA, tlsutil.CertRequest{Role: role, Region: tlsutil.DefaultRegion, Days: 30})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Config is the agent TLS configuration for role.
func (p *PKI) Config(role tlsutil.Role) tlsutil.Config {
	return tlsutil.Config{CAFile: p.CAFile, CertFile: p.CertFile[role], KeyFile: p.KeyFile[role],
		VerifyServerHostname: true, Region: tlsutil.DefaultRegion}
}

// Configurator loads the agent TLS configuration for role.
func (p *PKI) Configurator(t testing.TB, role tlsutil.Role) *tlsutil.Configurator {
	t.Helper()
	c, err := tlsutil.NewConfigurator(p.Config(role))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CLIConfig is what the CLI builds from -ca-cert/-client-cert/-client-key.
func (p *PKI) CLIConfig(t testing.TB) *tls.Config {
	t.Helper()
	c, err := tlsutil.ClientConfigFromFiles(p.CAFile, p.CertFile[tlsutil.RoleCLI], p.KeyFile[tlsutil.RoleCLI], tlsutil.DefaultRegion)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// security is a cluster's TLS and ACL state.
type security struct {
	pki *PKI // nil: plaintext

	mu    sync.Mutex
	token string // the bootstrap management token, once made
}

// PKI returns the cluster's PKI (nil when TLS is off).
func (c *Cluster) PKI() *PKI { return c.sec.pki }

// ManagementToken bootstraps ACLs on first use (waiting for a leader) and
// returns the management token's secret; "" when ACLs are off.
func (c *Cluster) ManagementToken() string {
	c.t.Helper()
	if c.opts.Insecure {
		return ""
	}
	c.sec.mu.Lock()
	defer c.sec.mu.Unlock()
	if c.sec.token != "" {
		return c.sec.token
	}
	WaitFor(c.t, 30*time.Second, func() error {
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			cl, err := api.NewClient(c.APIConfig(s.Addr, ""))
			if err != nil {
				return err
			}
			tok, err := cl.ACLBootstrap(Ctx(c.t, 10*time.Second))
			cl.Close()
			if err != nil {
				return err
			}
			c.sec.token = tok.SecretID
			return nil
		}
		return os.ErrNotExist
	})
	return c.sec.token
}

// APIConfig is an api client configuration for addr with the cluster's
// TLS (the cli certificate) and the given token.
func (c *Cluster) APIConfig(addr, token string) api.Config {
	cfg := api.Config{Addresses: []string{addr}, Timeout: 30 * time.Second, Token: token}
	if c.sec.pki != nil {
		cfg.TLS = c.sec.pki.CLIConfig(c.t)
	}
	return cfg
}

// lazyManagementToken is the management token once a leader can make it,
// "" before: a client made before the cluster formed (to ping a server
// that is starting) picks the token up at its first call after that.
func (c *Cluster) lazyManagementToken() string {
	c.sec.mu.Lock()
	token := c.sec.token
	c.sec.mu.Unlock()
	if token != "" || c.opts.Insecure || c.Leader() == nil {
		return token
	}
	return c.ManagementToken()
}

// ClientWithToken returns an API client for this server that sends token
// (and the cluster's TLS settings), for tests of what a token may do.
func (s *TestServer) ClientWithToken(token string) *api.Client {
	return s.newClient(s.c.APIConfig(s.Addr, token))
}

// ServerIdentityClient returns an API client for this server that presents
// a server certificate (and the management token): for tests that drive
// the servers' own calls (ClientCSI.*, Status.HasNodeConn), which only a
// server may make. With TLS off it is Client().
func (s *TestServer) ServerIdentityClient() *api.Client {
	return s.serverIdentityClient(0)
}

// ServerIdentityClientNoRetry is ServerIdentityClient for a call that is
// expected to be answered no_leader: the answer is returned at once, not
// retried for api.DefaultRetryNoLeaderFor (10 s) first.
func (s *TestServer) ServerIdentityClientNoRetry() *api.Client {
	return s.serverIdentityClient(-1)
}

func (s *TestServer) serverIdentityClient(retryNoLeaderFor time.Duration) *api.Client {
	cfg := s.c.APIConfig(s.Addr, "")
	cfg.RetryNoLeaderFor = retryNoLeaderFor
	cfg.TokenFunc = s.c.lazyManagementToken
	if pki := s.c.PKI(); pki != nil {
		cfg.TLS = pki.Configurator(s.c.t, tlsutil.RoleServer).OutgoingConfig()
	}
	return s.newClient(cfg)
}

func (s *TestServer) newClient(cfg api.Config) *api.Client {
	cl, err := api.NewClient(cfg)
	if err != nil {
		s.c.t.Fatalf("client: %v", err)
	}
	s.c.t.Cleanup(func() { cl.Close() })
	return cl
}
