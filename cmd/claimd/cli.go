package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/tlsutil"
)

// cliFlags are shared by every command that talks to a server.
type cliFlags struct {
	address    string
	timeout    time.Duration
	token      string
	caCert     string
	clientCert string
	clientKey  string
	region     string
}

func (c *cliFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.address, "address", "", "server address(es), comma-separated (default $CLAIMD_ADDR or "+api.DefaultAddress+")")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "how long to wait for the server")
	fs.StringVar(&c.token, "token", "", "ACL token secret (default $CLAIMD_TOKEN)")
	fs.StringVar(&c.caCert, "ca-cert", "", "CA certificate to verify the server with; turns TLS on (default $CLAIMD_CACERT)")
	fs.StringVar(&c.clientCert, "client-cert", "", "client certificate for mutual TLS (default $CLAIMD_CLIENT_CERT)")
	fs.StringVar(&c.clientKey, "client-key", "", "key of -client-cert (default $CLAIMD_CLIENT_KEY)")
	fs.StringVar(&c.region, "region", "", "the servers' region, checked in their certificate name (default $CLAIMD_REGION or global)")
}

// apiConfig builds the api client's configuration from the flags and the
// environment (flags win).
func (c *cliFlags) apiConfig() (api.Config, error) {
	cfg := api.Config{Addresses: api.AddressesFromEnv(c.address), Timeout: c.timeout, Token: api.TokenFromEnv(c.token)}
	caCert := flagOrEnv(c.caCert, "CLAIMD_CACERT")
	if caCert == "" {
		return cfg, nil
	}
	tlsCfg, err := tlsutil.ClientConfigFromFiles(caCert, flagOrEnv(c.clientCert, "CLAIMD_CLIENT_CERT"),
		flagOrEnv(c.clientKey, "CLAIMD_CLIENT_KEY"), flagOrEnv(c.region, "CLAIMD_REGION"))
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tlsCfg
	return cfg, nil
}

func flagOrEnv(flagValue, env string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(env)
}

// session opens a client and a context bounded by -timeout; done releases
// both.
func (c *cliFlags) session() (*api.Client, context.Context, func(), error) {
	cfg, err := c.apiConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// newFlagSet makes a flag set that reports errors to stderr and never exits.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func fail(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "Error: "+format+"\n", args...)
	return 1
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
