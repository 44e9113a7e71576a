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

// session opens a client and a context bounded by -timeout; done releases
// both.
func (c *cliFlags) session() (*api.Client, context.Context, func(), error) {
	cl, err := api.NewClient(api.Config{Addresses: api.AddressesFromEnv(c.address), Timeout: c.timeout})
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
