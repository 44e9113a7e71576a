// Package api is the Go client for claimd servers, used by the CLI, the
// HTTP API, third-party schedulers, the tests and the benchmarks. It
// speaks msgpack RPC over one yamux session (protocol byte 0x03) to one
// server at a time, moving to the next address when that server cannot be
// reached.
//
// One file per resource (volumes.go, volume_snapshots.go, allocs.go,
// nodes.go, plugins.go, evals.go, acl.go, system.go, operator.go,
// operator_snapshot.go, status.go), one method per call. The package
// links neither the state machine (go-memdb) nor Raft: deps_test.go
// checks it.
package api

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// DefaultAddress is where the CLI looks for a server without -address or
// CLAIMD_ADDR.
const DefaultAddress = "127.0.0.1:4647"

// Defaults of Config.
const (
	// DefaultTimeout bounds a call that is not a blocking query: writes
	// may be held for a leader for several seconds.
	DefaultTimeout = 60 * time.Second
	// DefaultRetryNoLeaderFor bounds how long a call answered no_leader
	// is retried.
	DefaultRetryNoLeaderFor = 10 * time.Second
)

// Config configures a Client.
type Config struct {
	// Addresses of servers, tried in order.
	Addresses []string
	// Timeout bounds each call that is not a blocking query (0 =
	// DefaultTimeout).
	Timeout time.Duration
	Dialer  rpc.Dialer
	Logger  hclog.Logger
	// RetryNoLeaderFor bounds how long a call answered no_leader is
	// retried (0 = DefaultRetryNoLeaderFor, negative = never).
	RetryNoLeaderFor time.Duration
	// Token is the ACL token's secret sent with every call that does not
	// carry one of its own.
	Token string
	// TokenFunc, when set and Token is empty, is asked for the token at
	// each call (a token that is made or rotated after the client).
	TokenFunc func() string
	// TLS, when set, makes every connection TLS (tlsutil.ClientConfigFromFiles
	// builds it from -ca-cert, -client-cert and -client-key).
	TLS *tls.Config
}

// TokenFromEnv is the flag value, or CLAIMD_TOKEN.
func TokenFromEnv(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv("CLAIMD_TOKEN")
}

// AddressesFromEnv splits a comma-separated list, or CLAIMD_ADDR, or the
// default.
func AddressesFromEnv(flagValue string) []string {
	v := flagValue
	if v == "" {
		v = os.Getenv("CLAIMD_ADDR")
	}
	if v == "" {
		v = DefaultAddress
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Client is safe for concurrent use.
type Client struct {
	cfg Config

	mu   sync.Mutex
	next int // index of the address to use
	conn *rpc.MuxClient
}

// NewClient makes a client; it dials on first use.
func NewClient(cfg Config) (*Client, error) {
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("api: at least one server address is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryNoLeaderFor == 0 {
		cfg.RetryNoLeaderFor = DefaultRetryNoLeaderFor
	}
	if cfg.TLS != nil {
		tlsCfg := cfg.TLS
		cfg.Dialer = rpc.TLSDialer(cfg.Dialer, func() *tls.Config { return tlsCfg }, false)
	}
	return &Client{cfg: cfg}, nil
}

// Close closes the session.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		err := c.conn.Close()
		c.conn = nil
		return err
	}
	return nil
}

func (c *Client) session(ctx context.Context) (*rpc.MuxClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	var lastErr error
	for range c.cfg.Addresses {
		addr := c.cfg.Addresses[c.next%len(c.cfg.Addresses)]
		conn, err := rpc.DialMux(ctx, c.cfg.Dialer, addr, c.cfg.Logger)
		if err == nil {
			c.conn = conn
			return conn, nil
		}
		lastErr = err
		c.next++
	}
	return nil, lastErr
}

// dropSession forgets a broken session and moves to the next address.
func (c *Client) dropSession(conn *rpc.MuxClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn {
		c.conn.Close()
		c.conn = nil
		c.next++
	}
}

// Call invokes an RPC method. Calls that fail before being sent are retried
// on the next server; others return their error, testable with errors.Is
// against the structs.Err* sentinels.
func (c *Client) Call(ctx context.Context, method string, args, reply any) error {
	if a, ok := args.(structs.Authenticated); ok && a.Token() == "" {
		token := c.cfg.Token
		if token == "" && c.cfg.TokenFunc != nil {
			token = c.cfg.TokenFunc()
		}
		a.SetToken(token)
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := c.cfg.Timeout
		if q, ok := args.(interface{ QueryWait() time.Duration }); ok {
			timeout += q.QueryWait()
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// no_leader means the request was not applied: retry it through an
	// election (the server holds forwarded calls itself; this covers a
	// leader that lost leadership under the call). A call whose outcome is
	// unknown (the leader lost leadership while committing it, or the
	// connection broke after it was sent) is retried the same way when
	// sending it twice is the same as once (structs.ResendSafe, decision
	// 35); any other returns its error.
	for {
		err := c.retry(ctx, func() error {
			return c.callOnce(ctx, method, args, reply)
		}, func(err error) bool {
			return retryCall(method, args, err)
		})
		if !waitRetryAfter(ctx, err) {
			return err
		}
	}
}

// waitRetryAfter is structs.WaitRetryAfter: a server with no room for a
// call now (a read past its limits, a new node past its certificate's
// rate) refused it before doing anything and said when to come back.
var waitRetryAfter = structs.WaitRetryAfter

// retry runs try until it succeeds or again says its error is final,
// pacing the tries 50 ms apart doubling to 1 s, for at most
// RetryNoLeaderFor. The context's end stops it; the error is try's last.
func (c *Client) retry(ctx context.Context, try func() error, again func(error) bool) error {
	pace := backoff.New(50*time.Millisecond, time.Second)
	giveUp := time.Now().Add(c.cfg.RetryNoLeaderFor)
	for {
		err := try()
		if !again(err) {
			return err
		}
		wait := pace.Next()
		if time.Now().Add(wait).After(giveUp) || backoff.Sleep(ctx, wait) != nil {
			return err
		}
	}
}

// call makes one call whose whole answer is the result.
func call[R any](ctx context.Context, c *Client, method string, args any) (*R, error) {
	var out R
	err := c.Call(ctx, method, args, &out)
	return &out, err
}

// write makes a call that answers only with the Raft index of its write.
func (c *Client) write(ctx context.Context, method string, args any) (uint64, error) {
	out, err := call[structs.GenericResponse](ctx, c, method, args)
	return out.Index, err
}

// retryCall: err says the call was not applied (no_leader), or it may have
// been and the call is idempotent. A call that was never sent (no server
// reachable) has already been tried at every address by callOnce.
func retryCall(method string, args any, err error) bool {
	if errors.Is(err, structs.ErrNoLeader) {
		return true
	}
	return structs.OutcomeUnknown(err) && !errors.Is(err, rpc.ErrNotSent) && structs.ResendSafe(method, args)
}

func (c *Client) callOnce(ctx context.Context, method string, args, reply any) error {
	var err error
	for range len(c.cfg.Addresses) + 1 {
		var conn *rpc.MuxClient
		conn, err = c.session(ctx)
		if err != nil {
			return err
		}
		err = conn.Call(ctx, method, args, reply)
		if err == nil || !errors.Is(err, rpc.ErrTransport) {
			return err
		}
		c.dropSession(conn)
		if !errors.Is(err, rpc.ErrNotSent) {
			return err
		}
	}
	return err
}
