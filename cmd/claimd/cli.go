package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/claimd/claimd/api"
)

// cliFlags are shared by every command that talks to a server.
type cliFlags struct {
	address string
	timeout time.Duration
}

func (c *cliFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.address, "address", "", "server address(es), comma-separated (default $CLAIMD_ADDR or "+api.DefaultAddress+")")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "how long to wait for the server")
}

func (c *cliFlags) client() (*api.Client, error) {
	return api.NewClient(api.Config{Addresses: api.AddressesFromEnv(c.address), Timeout: c.timeout})
}

func (c *cliFlags) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
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
