package csi

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultCallTimeout bounds one plugin call when ClientOptions.Timeout is
// zero. Staging a real volume may format a filesystem, which takes seconds,
// so this is generous; callers that need a tighter bound pass a context with
// a deadline, and the shorter of the two wins.
const DefaultCallTimeout = 30 * time.Second

// ClientOptions configure a Client.
type ClientOptions struct {
	// PluginID names the plugin in errors and logs.
	PluginID string
	// Timeout bounds every call; DefaultCallTimeout when zero.
	Timeout time.Duration
	// Logger receives debug lines; a null logger when nil.
	Logger hclog.Logger
}

// Client talks to one CSI plugin over its unix socket.
//
// A Client is safe for concurrent use by any number of goroutines. It does
// not connect until the first call, and reconnects by itself when the plugin
// restarts on the same socket, so a Client may outlive many plugin processes.
// Calls fail fast with an unavailable error while the socket is missing.
type Client struct {
	pluginID string
	endpoint string
	timeout  time.Duration
	logger   hclog.Logger

	conn       *grpc.ClientConn
	identity   csipb.IdentityClient
	controller csipb.ControllerClient
	node       csipb.NodeClient
}

// NewClient prepares a client for the plugin at endpoint ("unix:///path" or a
// plain path). It does no I/O.
func NewClient(endpoint string, opts ClientOptions) (*Client, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix:"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A unix socket has no host name; gRPC would otherwise put the socket
		// path in the :authority header, which some plugins refuse.
		grpc.WithAuthority("localhost"),
	)
	if err != nil {
		return nil, fmt.Errorf("csi client for %q: %w", endpoint, err)
	}
	c := &Client{
		pluginID:   opts.PluginID,
		endpoint:   endpoint,
		timeout:    opts.Timeout,
		logger:     opts.Logger,
		conn:       conn,
		identity:   csipb.NewIdentityClient(conn),
		controller: csipb.NewControllerClient(conn),
		node:       csipb.NewNodeClient(conn),
	}
	if c.timeout <= 0 {
		c.timeout = DefaultCallTimeout
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	return c, nil
}

// Endpoint is the endpoint the client was created with.
func (c *Client) Endpoint() string { return c.endpoint }

// Close releases the connection. Calls after Close fail.
func (c *Client) Close() error { return c.conn.Close() }

// callCtx applies the per-call timeout on top of the caller's context.
func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// invoke runs one RPC with the per-call timeout and wraps its error.
func invoke[Req, Resp any](ctx context.Context, c *Client, method string, req Req,
	fn func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	if err := ctxError(ctx, c.pluginID, method); err != nil {
		var zero Resp
		return zero, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := fn(cctx, req)
	return resp, wrapError(c.pluginID, method, err)
}
