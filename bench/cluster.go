package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/structs"
)

// cluster is what the tool knows of the servers: their addresses and a
// client for setup and reads, which may use any of them.
type cluster struct {
	cfg     *Config
	servers []string // sorted
	admin   *api.Client
	// security is Result.Security for every run.
	security string
	// cpu reads the servers' CPU time (bench/cpu.go).
	cpu *cpuMeter
}

// discover waits for a leader (up to the call timeout) and learns every
// voter's address from Status.Peers.
func discover(ctx context.Context, cfg *Config) (*cluster, error) {
	admin, err := api.NewClient(cfg.apiConfig(cfg.Addresses, cfg.Token))
	if err != nil {
		return nil, err
	}
	c := &cluster{cfg: cfg, admin: admin}
	if _, err := c.leader(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	peers, err := admin.Peers(ctx)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("list servers: %w", err)
	}
	c.servers = append(c.servers, peers...)
	for _, a := range cfg.Addresses {
		if !slices.Contains(c.servers, a) {
			c.servers = append(c.servers, a)
		}
	}
	slices.Sort(c.servers)
	if c.security, err = c.probeSecurity(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	c.cpu = newCPUMeter(ctx, c.servers, c.pidOf)
	if c.cpu.reason != "" {
		fmt.Fprintf(cfg.Progress, "no server CPU figures: %s\n", c.cpu.reason)
	} else {
		fmt.Fprintf(cfg.Progress, "server CPU from /proc: %v\n", c.cpu.servers)
	}
	return c, nil
}

// pidOf asks the server at addr for its process ID. Status.Runtime is
// answered from the server's own state: a follower that has not yet
// applied a token just created (a fresh `acl bootstrap`) refuses it, so a
// refusal is asked again for a few seconds.
func (c *cluster) pidOf(ctx context.Context, addr string) (int, error) {
	cl, err := api.NewClient(c.cfg.apiConfig([]string{addr}, c.cfg.Token))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := cl.Runtime(ctx)
		if err == nil {
			return st.PID, nil
		}
		if !errors.Is(err, structs.ErrPermissionDenied) || time.Now().After(deadline) {
			return 0, err
		}
		if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// probeSecurity says how the tool talks to the cluster (Result.Security):
// TLS when it was given a TLS configuration (the servers accepted it), ACLs
// when the servers know its token. Without a token nothing is asked, so
// that a cluster with ACLs records no denial for the probe.
func (c *cluster) probeSecurity(ctx context.Context) (string, error) {
	var parts []string
	if c.cfg.TLS != nil {
		parts = append(parts, "tls")
	}
	if c.cfg.Token != "" {
		_, err := c.admin.ACLTokenSelf(ctx)
		switch {
		case err == nil:
			parts = append(parts, "acl")
		case errors.Is(err, structs.ErrInvalid):
			// ACLs are off: the servers ignore the token.
		default:
			return "", fmt.Errorf("check the token: %w", err)
		}
	}
	return strings.Join(parts, "+"), nil
}

func (c *cluster) close() { c.admin.Close() }

// leader asks the servers who leads, waiting through an election for at
// most the call timeout.
func (c *cluster) leader(ctx context.Context) (string, error) {
	deadline := time.Now().Add(c.cfg.CallTimeout)
	for {
		addr, err := c.admin.Leader(ctx)
		if err == nil && addr != "" {
			return addr, nil
		}
		if err != nil && !errors.Is(err, structs.ErrNoLeader) {
			return "", fmt.Errorf("find the leader: %w", err)
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = structs.ErrNoLeader
			}
			return "", fmt.Errorf("find the leader: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// resolve turns a target into a server address: the leader, the first
// follower in address order, or a literal address.
func (c *cluster) resolve(ctx context.Context, target string) (addr, leader string, err error) {
	leader, err = c.leader(ctx)
	if err != nil {
		return "", "", err
	}
	switch target {
	case TargetLeader:
		return leader, leader, nil
	case TargetFollower:
		for _, s := range c.servers {
			if s != leader {
				return s, leader, nil
			}
		}
		return "", "", fmt.Errorf("no follower: the cluster has only %v", c.servers)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return "", "", fmt.Errorf("target %q is not %q, %q or a host:port: %v", target, TargetLeader, TargetFollower, err)
	}
	return target, leader, nil
}

// apiConfig is an api client configuration for addrs sending token, with
// the run's TLS.
func (cfg *Config) apiConfig(addrs []string, token string) api.Config {
	return api.Config{Addresses: addrs, Timeout: cfg.CallTimeout, Logger: cfg.Logger, Token: token, TLS: cfg.TLS}
}

// callerClients opens n clients to addr, each with its own session (a TLS
// connection when TLS is on), that send token with every call, and makes
// one call on each so that no dial lands in the measured latency.
func (c *cluster) callerClients(ctx context.Context, addr string, n int, token string) ([]*api.Client, error) {
	out := make([]*api.Client, 0, n)
	for range n {
		cl, err := api.NewClient(c.cfg.apiConfig([]string{addr}, token))
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, cl)
		if err := cl.Ping(ctx); err != nil {
			closeAll(out)
			return nil, fmt.Errorf("connect to %s: %w", addr, err)
		}
	}
	return out, nil
}

func closeAll(cs []*api.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// watchLeader asks who leads twice a second until the returned stop is
// called, and sets *changed if any answer is not leader (another server,
// or none: an election). Comparing only the start and the end would miss
// a leader that stepped down and won again.
func (c *cluster) watchLeader(ctx context.Context, leader string, changed *bool) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			addr, err := c.admin.Leader(cctx)
			cancel()
			if err == nil && addr != leader {
				*changed = true
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
