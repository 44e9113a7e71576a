package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/tlsutil"
)

// devPKI is the dev agent's own CA and certificates, made at start in its
// data dir: -dev runs with mutual TLS and ACLs like a production cluster,
// so that what a user tries first is what they will run.
type devPKI struct {
	dir                                   string
	caFile, serverCert, serverKey         string
	cliCert, cliKey, envFile, region, ca0 string
}

func newDevPKI(dataDir string) (*devPKI, error) {
	d := &devPKI{dir: filepath.Join(dataDir, "tls"), region: tlsutil.DefaultRegion}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := tlsutil.GenerateCA(30)
	if err != nil {
		return nil, err
	}
	d.caFile = filepath.Join(d.dir, "ca.pem")
	if err := os.WriteFile(d.caFile, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	issue := func(role tlsutil.Role) (string, string, error) {
		certPEM, keyPEM, err := tlsutil.GenerateCert(ca, tlsutil.CertRequest{Role: role, Region: d.region, Days: 30})
		if err != nil {
			return "", "", err
		}
		cert, key := filepath.Join(d.dir, string(role)+".pem"), filepath.Join(d.dir, string(role)+"-key.pem")
		if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
			return "", "", err
		}
		return cert, key, os.WriteFile(key, keyPEM, 0o600)
	}
	if d.serverCert, d.serverKey, err = issue(tlsutil.RoleServer); err != nil {
		return nil, err
	}
	if d.cliCert, d.cliKey, err = issue(tlsutil.RoleCLI); err != nil {
		return nil, err
	}
	d.envFile = filepath.Join(dataDir, "dev.env")
	return d, nil
}

// agentTLS is the server's (and the in-process client agent's) TLS.
func (d *devPKI) agentTLS() tlsutil.Config {
	return tlsutil.Config{CAFile: d.caFile, CertFile: d.serverCert, KeyFile: d.serverKey,
		VerifyServerHostname: true, Region: d.region}
}

// bootstrap makes the management token once the dev server leads, writes
// the CLI's environment to dev.env (mode 0600: it holds the token) and
// returns dev.env's path. dev.env is the one place the token is written:
// nothing that holds it leaves this function, so no caller can print it.
func (d *devPKI) bootstrap(addr string, timeout time.Duration) (string, error) {
	tlsCfg, err := tlsutil.ClientConfigFromFiles(d.caFile, d.cliCert, d.cliKey, d.region)
	if err != nil {
		return "", err
	}
	cl, err := api.NewClient(api.Config{Addresses: []string{addr}, TLS: tlsCfg, Timeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		tok, err := cl.ACLBootstrap(ctx)
		if err == nil {
			exports := strings.Join([]string{
				"CLAIMD_ADDR=" + addr, "CLAIMD_CACERT=" + d.caFile, "CLAIMD_CLIENT_CERT=" + d.cliCert,
				"CLAIMD_CLIENT_KEY=" + d.cliKey, "CLAIMD_TOKEN=" + tok.SecretID,
			}, " ")
			return d.envFile, os.WriteFile(d.envFile, []byte("export "+exports+"\n"), 0o600)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("ACL bootstrap of the dev agent: %w", err)
		case <-time.After(200 * time.Millisecond): // retry pacing while the server elects itself
		}
	}
}
