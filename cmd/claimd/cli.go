package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/rpc"
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
	fs.DurationVar(&c.timeout, "timeout", api.DefaultTimeout, "how long to wait for the server")
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

// cmd is one run of a command: its flag set and output, and, for a command
// that talks to a server, the connection flags. Every command starts with
// one (newCmd or newServerCmd); run is the prologue and epilogue of those
// that call a server.
type cmd struct {
	fs     *flag.FlagSet
	conn   cliFlags
	asJSON bool // -json, when the command took jsonFlag
	// nodeArgs and allocArgs are the positional arguments that name a
	// node or an allocation (-1: every one), resolved to full IDs
	// (resolve.go) before the command runs.
	nodeArgs, allocArgs []int
	stdout, stderr      io.Writer
}

// newCmd is a command that talks to no server (or not through the api
// client): a flag set named as the command is typed. Every command takes
// its flags before, between or after its positional arguments
// (parseInterspersed): `alloc status ID -json` once printed every
// allocation, the flag taken for a second argument and both ignored.
func newCmd(name string, stdout, stderr io.Writer) *cmd {
	return &cmd{fs: newFlagSet(name, stderr), stdout: stdout, stderr: stderr}
}

// newServerCmd is a command that talks to a server: -address, -timeout,
// -token, -ca-cert, -client-cert, -client-key and -region.
func newServerCmd(name string, stdout, stderr io.Writer) *cmd {
	c := newCmd(name, stdout, stderr)
	c.conn.register(c.fs)
	return c
}

// nodeAt says positional argument i names a node (a name or an ID
// prefix will do).
func (c *cmd) nodeAt(i int) *cmd {
	c.nodeArgs = append(c.nodeArgs, i)
	return c
}

// allocAt says positional argument i (-1: every one) names an allocation.
func (c *cmd) allocAt(i int) *cmd {
	c.allocArgs = append(c.allocArgs, i)
	return c
}

// resolveArgs turns the node and allocation arguments into full IDs.
func (c *cmd) resolveArgs(ctx context.Context, cl *api.Client, pos []string) error {
	for _, set := range []struct {
		at      []int
		resolve func(context.Context, *api.Client, string) (string, error)
	}{{c.nodeArgs, resolveNode}, {c.allocArgs, resolveAlloc}} {
		for _, i := range set.at {
			for j := range pos {
				if i != j && i != -1 {
					continue
				}
				id, err := set.resolve(ctx, cl, pos[j])
				if err != nil {
					return err
				}
				pos[j] = id
			}
		}
	}
	return nil
}

// jsonFlag adds -json; json prints with it.
func (c *cmd) jsonFlag(help string) *cmd {
	c.fs.BoolVar(&c.asJSON, "json", false, help)
	return c
}

// argCheck checks a command's positional arguments (and anything else to
// refuse before a server is contacted); its error is the message.
type argCheck func(pos []string) error

// exactly, atMost and atLeast refuse another number of positional
// arguments with the command's usage line.
func exactly(n int, usage string) argCheck {
	return func(pos []string) error { return require(len(pos) == n, usage) }
}

func atMost(n int, usage string) argCheck {
	return func(pos []string) error { return require(len(pos) <= n, usage) }
}

func atLeast(n int, usage string) argCheck {
	return func(pos []string) error { return require(len(pos) >= n, usage) }
}

// require is an error saying msg unless ok.
func require(ok bool, msg string) error {
	if ok {
		return nil
	}
	return errors.New(msg)
}

// noArgument refuses any positional argument, naming the first.
func noArgument(pos []string) error {
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	return nil
}

// noArguments refuses any positional argument, naming them all.
func noArguments(pos []string) error {
	if len(pos) > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(pos, " "))
	}
	return nil
}

// parse parses args, flags anywhere among them, and checks the positional
// arguments (check nil: there must be none; an extra argument is an
// error, never ignored). It returns false when the command must exit 1:
// the flag package or the check has said why.
func (c *cmd) parse(args []string, check argCheck) ([]string, bool) {
	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		return nil, false
	}
	if check == nil {
		check = noArguments
	}
	if err := check(pos); err != nil {
		c.fail("%v", err)
		return nil, false
	}
	return pos, true
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments (`volume expand VOL -capacity 2GiB`), which the
// flag package alone stops at. It returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		rest := fs.Args()
		if rest[0] == "--" || len(rest) == 1 {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// run is the prologue every command that calls a server shares: parse
// and check the arguments, open a client and a context bounded by
// -timeout, run do, close both. It returns do's exit code, or 1 when the
// flags, the arguments or the client's configuration are refused.
func (c *cmd) run(args []string, check argCheck, do func(ctx context.Context, cl *api.Client, pos []string) int) int {
	pos, ok := c.parse(args, check)
	if !ok {
		return 1
	}
	cl, ctx, done, err := c.conn.session()
	if err != nil {
		return c.fail("%v", err)
	}
	defer done()
	if err := c.resolveArgs(ctx, cl, pos); err != nil {
		return c.fail("%v", err)
	}
	return do(ctx, cl, pos)
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

// fail reports an error on stderr and returns exit code 1. A plaintext
// call that the server cut off at once gets a hint: that is what a server
// with TLS on does to a client without it, and the bare error ("unexpected
// EOF", "connection reset by peer") does not say so.
func (c *cmd) fail(format string, args ...any) int {
	code := fail(c.stderr, format, args...)
	if flagOrEnv(c.conn.caCert, "CLAIMD_CACERT") != "" {
		return code
	}
	for _, a := range args {
		if err, ok := a.(error); ok && cutOffPlaintext(err) {
			fmt.Fprintln(c.stderr, "The server closed the connection at once: it may require TLS. Set CLAIMD_CACERT,\n"+
				"CLAIMD_CLIENT_CERT and CLAIMD_CLIENT_KEY (or -ca-cert, -client-cert and -client-key).")
			break
		}
	}
	return code
}

// cutOffPlaintext reports a connection that was made and then cut off by
// the server: any transport failure but a failed dial (nothing listening
// is a different mistake). How the cut shows depends on when the client
// notices it (EOF, reset, a shut-down session or connection), so no
// message is matched but the dial's.
func cutOffPlaintext(err error) bool {
	if !errors.Is(err, rpc.ErrTransport) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false
	}
	return !strings.Contains(err.Error(), "dial ")
}

// json prints v as indented JSON on stdout.
func (c *cmd) json(v any) int {
	return jsonOut(c.stdout, c.stderr, v)
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
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "<redacted>" stays readable
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonSafe(buf.Bytes())) // no raw terminal controls in strings
	return err
}

func jsonOut(stdout, stderr io.Writer, v any) int {
	if err := printJSON(stdout, v); err != nil {
		return fail(stderr, "%v", err)
	}
	return 0
}

// orEmpty is a list as JSON shows it: [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// done ends a command that changes something: its error after what, or
// the line saying what it did.
func (c *cmd) done(err error, what, format string, args ...any) int {
	if err != nil {
		return c.fail("%s: %v", what, err)
	}
	fmt.Fprintf(c.stdout, format, args...)
	return 0
}

// showOne ends a command that shows one object: its error after what, the
// object as JSON with -json, else print's text.
func showOne[T any](x *cmd, what string, item T, err error, print func(io.Writer, T)) int {
	if err != nil {
		return x.fail("%s: %v", what, err)
	}
	if x.asJSON {
		return x.json(item)
	}
	print(x.stdout, item)
	return 0
}

// showList ends a command that lists objects: its error after what, the
// list as JSON with -json (never null), none when it is empty, else
// print's table.
func showList[T any](x *cmd, what string, items []T, err error, none string, print func(io.Writer, []T)) int {
	if err != nil {
		return x.fail("%s: %v", what, err)
	}
	if x.asJSON {
		return x.json(orEmpty(items))
	}
	if len(items) == 0 {
		fmt.Fprintln(x.stdout, none)
		return 0
	}
	print(x.stdout, items)
	return 0
}

// showOneOrAll is `X status [ID]`: with one argument the object it names
// (showOne), else the list (showList; further arguments are not looked
// at).
func showOneOrAll[T any](x *cmd, what string, pos []string, one func(id string) (T, error), all func() ([]T, error),
	none string, printOne func(io.Writer, T), printAll func(io.Writer, []T)) int {
	if len(pos) == 1 {
		item, err := one(pos[0])
		return showOne(x, what, item, err, printOne)
	}
	items, err := all()
	return showList(x, what, items, err, none, printAll)
}
