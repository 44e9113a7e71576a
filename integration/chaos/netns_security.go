package chaos

// Mutual TLS and ACLs of the network-namespace backend: certificates for
// each process, the ACL bootstrap and the workload's token, and the check
// that the cluster really ran secured.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// nsWorkloadPolicyName names the workload's policy and token.
const nsWorkloadPolicyName = "chaos-workload"

// nsWorkloadPolicy is the workload's ACL policy: exactly what its callers
// and mount runners call (Volume.Get and Volume.Claim, which also
// releases; Alloc.Place, Alloc.Stop and Alloc.Get), nothing else. The
// operator's calls (registering volumes, listing nodes, plugins and
// evals, transferring leadership, digests) use the management token.
const nsWorkloadPolicy = `
volume {
  capabilities = ["read", "claim"]
}
alloc {
  capabilities = ["read", "place", "stop"]
}
`

// tlsArgs issues a certificate for one process (its own, as a real
// deployment would) and returns the agent flags that use it; nil when the
// cluster is insecure.
func (c *netnsCluster) tlsArgs(role tlsutil.Role, name string) []string {
	if c.pki == nil {
		return nil
	}
	cert, key := c.pki.Issue(c.t, role, name)
	return []string{"-tls-ca-file", c.pki.CAFile, "-tls-cert-file", cert, "-tls-key-file", key}
}

// nsResetIndex is the index a refused second ACL bootstrap names.
var nsResetIndex = regexp.MustCompile(`reset index (\d+)`)

// bootstrapACL makes the management token (ACL.Bootstrap through the
// leader, retried until a leader answers) and then the workload's policy
// and token, all within timeout.
//
// A bootstrap that was applied but whose answer was lost leaves the
// cluster bootstrapped with a token nobody knows; the next attempt is
// refused naming the reset index, which is then written to every server's
// acl-bootstrap-reset (the leader reads it) to allow one more.
func (c *netnsCluster) bootstrapACL(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	attempts := 0
	err := nsPoll(time.Until(deadline), func() error {
		attempts++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader := c.Leader(ctx)
		if leader == "" {
			return errors.New("no leader known to a majority of servers")
		}
		cl, err := api.NewClient(c.apiConfig(leader, 10*time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		tok, err := cl.ACLBootstrap(ctx)
		if errors.Is(err, structs.ErrConflict) {
			m := nsResetIndex.FindStringSubmatch(err.Error())
			if m == nil {
				return err
			}
			c.t.Logf("netns: ACL bootstrap refused (%v): an earlier attempt was applied; allowing one more", err)
			for _, name := range c.names {
				if werr := os.WriteFile(filepath.Join(c.dataDir, name, "acl-bootstrap-reset"), []byte(m[1]), 0o600); werr != nil {
					return errors.Join(err, werr)
				}
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("bootstrap via %s: %w", leader, err)
		}
		if tok == nil || tok.SecretID == "" {
			return fmt.Errorf("bootstrap via %s: no token in the reply", leader)
		}
		c.mu.Lock()
		c.mgmtToken = tok.SecretID
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("no management token after %d attempts: %w", attempts, err)
	}
	work, err := c.policyToken(time.Until(deadline), nsWorkloadPolicyName, "what the chaos workload calls, nothing more", nsWorkloadPolicy)
	if err != nil {
		return fmt.Errorf("workload token: %w", err)
	}
	c.mu.Lock()
	c.workToken = work
	c.mu.Unlock()
	return nil
}

// policyToken applies a policy and returns the secret of a new client
// token holding only it, retrying through the leader within timeout.
func (c *netnsCluster) policyToken(timeout time.Duration, name, desc, rules string) (string, error) {
	var secret string
	err := nsPoll(timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		leader := c.Leader(ctx)
		if leader == "" {
			return errors.New("no leader")
		}
		cl := c.control(leader)
		if _, err := cl.ACLPolicyApply(ctx, name, desc, rules); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		// A token whose creation answer was lost is simply left unused.
		tok, err := cl.ACLTokenCreate(ctx, name, structs.ACLTokenClient, []string{name}, 0)
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		if tok == nil || tok.SecretID == "" {
			return errors.New("token: no secret in the reply")
		}
		secret = tok.SecretID
		return nil
	})
	return secret, err
}

// nsStarted matches a server's "server started" log line (text or JSON).
var nsStarted = regexp.MustCompile(`server started`)

// nsDenied matches a server's refusal of a call by the ACL check.
var nsDenied = regexp.MustCompile(`permission denied`)

// CheckSecured returns an error unless the cluster ran secured: every
// start of every server logged tls=true, tls_allow_plaintext=false and
// acl=true; no server refused any call for lack of permission (the
// workload's policy grants all it calls, the backend uses the management
// token), except two refusals by a server whose state is behind (see
// nsStaleNodeDenial and nsCatchUpWindow);
// and, probed now, a server refuses a plaintext connection, a TLS client
// without a certificate, a call without a token, and the workload token's
// use beyond its policy. With Insecure it checks nothing. It must run
// while the servers are up (before the test ends) and after the run: its
// own probes are refused on purpose and are logged as denials.
func (c *netnsCluster) CheckSecured() error {
	if c.opts.Insecure {
		return nil
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// The logs first, before this check's own probes add refusals.
	for _, name := range c.names {
		s := c.servers[name]
		starts, denied, err := nsScanSecurity(s.proc.logPath)
		if err != nil {
			fail("%s: %v", name, err)
			continue
		}
		if len(starts) == 0 {
			fail("%s: no %q line in %s", name, "server started", s.proc.logPath)
		}
		for _, st := range starts {
			if st.tls != "true" || st.plaintext != "false" || st.acl != "true" {
				fail("%s: server started exp: tls=true tls_allow_plaintext=false acl=true got: tls=%s tls_allow_plaintext=%s acl=%s (%s)",
					name, st.tls, st.plaintext, st.acl, s.proc.logPath)
			}
		}
		var other []string
		staleNode, staleToken := 0, 0
		for _, d := range denied {
			switch {
			case c.nsStaleNodeDenial(d.line):
				staleNode++
			case d.restarted && d.sinceStart >= 0 && d.sinceStart < nsCatchUpWindow && strings.Contains(d.line, nsTokenNotFound):
				staleToken++
			default:
				other = append(other, d.line)
			}
		}
		if staleNode > 0 {
			c.t.Logf("netns: %s refused %d node-secret calls of a client agent for its own node (the node not yet in that server's state)", name, staleNode)
		}
		if staleToken > 0 {
			c.t.Logf("netns: %s refused %d calls with %q within %s of a restart (its state not caught up)", name, staleToken, nsTokenNotFound, nsCatchUpWindow)
		}
		if len(other) > 0 {
			fail("%s: calls refused for lack of permission exp: none got: %d, first: %s", name, len(other), other[0])
		}
	}

	ping := func(ctx context.Context, cl *api.Client) error { return cl.Ping(ctx) }
	target := c.names[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, err := c.runtime(ctx, target)
	if err != nil {
		fail("%s: runtime before the probes: %v", target, err)
	}
	deniedBefore, err := c.aclDenied(ctx)
	if err != nil {
		fail("runtime before the probes: %v", err)
	}

	// Plaintext: refused (the server closes the connection).
	plain := c.apiConfig(target, 5*time.Second)
	plain.TLS, plain.RetryNoLeaderFor = nil, -1
	if err := c.probe(plain, ping); err == nil {
		fail("%s: plaintext Status.Ping exp: refused got: answered", target)
	}

	// TLS without a client certificate: mutual TLS refuses it.
	certless, err := tlsutil.ClientConfigFromFiles(c.pki.CAFile, "", "", tlsutil.DefaultRegion)
	if err != nil {
		fail("cli TLS config without a certificate: %v", err)
	} else {
		cfg := c.apiConfig(target, 5*time.Second)
		cfg.TLS, cfg.RetryNoLeaderFor = certless, -1
		if err := c.probe(cfg, ping); err == nil {
			fail("%s: TLS Status.Ping without a client certificate exp: refused got: answered", target)
		}
	}

	// TLS with the cli certificate but no token: an open method answers,
	// a capability is refused.
	anon := c.apiConfig(target, 5*time.Second)
	anon.RetryNoLeaderFor = -1
	if err := c.probe(anon, ping); err != nil {
		fail("%s: TLS Status.Ping with the cli certificate exp: answered got: %v", target, err)
	}
	if err := c.probe(anon, func(ctx context.Context, cl *api.Client) error {
		_, _, err := cl.Volumes(ctx, "", structs.QueryOptions{})
		return err
	}); !errors.Is(err, structs.ErrPermissionDenied) {
		fail("%s: Volume.List without a token exp: permission_denied got: %v", target, err)
	}

	// The workload's token: what its policy grants, and no more.
	work := c.apiConfig(target, 5*time.Second)
	work.RetryNoLeaderFor = -1
	c.mu.Lock()
	work.Token = c.workToken
	c.mu.Unlock()
	if err := c.probe(work, func(ctx context.Context, cl *api.Client) error {
		_, _, err := cl.Volumes(ctx, "", structs.QueryOptions{})
		return err
	}); err != nil {
		fail("%s: Volume.List with the workload token exp: answered got: %v", target, err)
	}
	if err := c.probe(work, func(ctx context.Context, cl *api.Client) error {
		_, err := cl.Runtime(ctx)
		return err
	}); !errors.Is(err, structs.ErrPermissionDenied) {
		fail("%s: Status.Runtime with the workload token exp: permission_denied got: %v", target, err)
	}
	if err := c.probe(work, func(ctx context.Context, cl *api.Client) error {
		_, err := cl.RegisterVolumes(ctx, volume("chaos-denied", PluginID, structs.AccessModeSingleNodeWriter))
		return err
	}); !errors.Is(err, structs.ErrPermissionDenied) {
		fail("%s: Volume.Register with the workload token exp: permission_denied got: %v", target, err)
	}

	// The servers counted the refusals (counters start at a server's last
	// start, so compare with the readings taken just before). Connections
	// are refused by the server dialled; a call is refused by the server
	// that serves it, the leader when it was forwarded, so ACL denials
	// are summed over the servers.
	after, err := c.runtime(ctx, target)
	switch {
	case err != nil:
		fail("%s: runtime after the probes: %v", target, err)
	case before != nil:
		if after.PlaintextRefused <= before.PlaintextRefused {
			fail("%s: PlaintextRefused exp: > %d got: %d", target, before.PlaintextRefused, after.PlaintextRefused)
		}
		if after.TLSHandshakeFails <= before.TLSHandshakeFails {
			fail("%s: TLSHandshakeFails exp: > %d got: %d", target, before.TLSHandshakeFails, after.TLSHandshakeFails)
		}
	}
	deniedAfter, err := c.aclDenied(ctx)
	switch {
	case err != nil:
		fail("runtime after the probes: %v", err)
	case deniedAfter < deniedBefore+3:
		fail("ACLDenied summed over the servers exp: >= %d got: %d", deniedBefore+3, deniedAfter)
	}
	return errors.Join(errs...)
}

// aclDenied is the sum of every server's ACLDenied counter.
func (c *netnsCluster) aclDenied(ctx context.Context) (uint64, error) {
	var n uint64
	for _, name := range c.names {
		st, err := c.runtime(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		n += st.ACLDenied
	}
	return n, nil
}

var (
	nsDeniedNode   = regexp.MustCompile(`is not node \\?"([0-9a-f-]+)\\?"'s secret`)
	nsDeniedRemote = regexp.MustCompile(`"?remote"?[=:]"?([0-9.]+):\d+`)
)

// nsStaleNodeDenial reports whether a permission-denied log line is a
// server refusing a client agent's call for the agent's own node, made
// with a node secret the server does not know (yet), from that node's
// host or through a server's latency proxy (the remote is then that
// server's address: agents learn the advertised addresses). An agent watches its allocations (Alloc.List, AllowStale) as
// soon as its Node.Register is acknowledged, and a follower serves that
// from its own state, which may not hold the node yet: it applies the
// entry a moment after the leader, or it restarted and has not heard from
// a leader. The agent retries; a node whose secret were really wrong
// would never run an allocation, which the run's checks would see.
func (c *netnsCluster) nsStaleNodeDenial(line string) bool {
	m, r := nsDeniedNode.FindStringSubmatch(line), nsDeniedRemote.FindStringSubmatch(line)
	if m == nil || r == nil {
		return false
	}
	for _, w := range append(append([]*nsWorker(nil), c.workers...), c.ctrl) {
		if w == nil || w.nodeID != m[1] {
			continue
		}
		if c.lab.Addr(w.name) == r[1] {
			return true
		}
		for _, name := range c.names {
			if c.lab.Addr(name) == r[1] {
				return true
			}
		}
		return false
	}
	return false
}

// probe makes a short-lived client from cfg and runs fn with it.
func (c *netnsCluster) probe(cfg api.Config, fn func(context.Context, *api.Client) error) error {
	cl, err := api.NewClient(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return fn(ctx, cl)
}

// runtime reads a server's Status.Runtime with the management token. A
// fresh reply each time, read only on success (see leaderViews).
func (c *netnsCluster) runtime(ctx context.Context, server string) (*structs.RuntimeStats, error) {
	var st structs.RuntimeStats
	if err := c.control(server).Call(ctx, "Status.Runtime", &structs.EmptyArgs{}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// SecurityCounters is one line per server with its security counters
// (since its last start), for the test log.
func (c *netnsCluster) SecurityCounters() string {
	var b strings.Builder
	for _, name := range c.names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.runtime(ctx, name)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "%s: acl denied %d, TLS handshakes failed %d, plaintext refused %d\n",
			name, st.ACLDenied, st.TLSHandshakeFails, st.PlaintextRefused)
	}
	return b.String()
}

// nsStart is what one "server started" line says about security.
type nsStart struct{ tls, plaintext, acl string }

// nsTokenNotFound is how a server refuses a token it does not know, and
// nsCatchUpWindow how long after a restart CheckSecured accepts that
// refusal. A restarted server rebuilds its state from its last snapshot
// and applies the rest of its log only once a leader tells it what is
// committed, so for a moment it may not know tokens made after that
// snapshot (the bootstrap and workload tokens) and refuses calls it serves
// itself, such as the backend's Status.StateDigest. It catches up within
// a heartbeat of hearing from a leader; the window also covers an
// election or two.
const (
	nsTokenNotFound = "ACL token not found"
	nsCatchUpWindow = 15 * time.Second
)

// nsDenial is one permission-denied line of a server log: restarted when
// it comes after a second or later start of the process, sinceStart the
// time from that start (-1 when a time cannot be read).
type nsDenial struct {
	line       string
	restarted  bool
	sinceStart time.Duration
}

// nsStartMarker is the line nsProc.start writes before each start.
var nsStartMarker = regexp.MustCompile(`^=== netns: start (\d+) of \S+ in \S+ at (\S+)$`)

// nsLineTime reads the time of a log line: the first field of a text line,
// "@timestamp" of a JSON one.
func nsLineTime(line string) (time.Time, bool) {
	if strings.HasPrefix(line, "{") {
		var m struct {
			TS string `json:"@timestamp"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			return time.Time{}, false
		}
		line = m.TS
	}
	f, _, _ := strings.Cut(line, " ")
	t, err := time.Parse(time.RFC3339Nano, f)
	return t, err == nil
}

// nsScanSecurity reads a server log: the security settings of each start
// and the permission-denied lines.
func nsScanSecurity(path string) (starts []nsStart, denied []nsDenial, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var startN int
	var startAt time.Time
	for sc.Scan() {
		line := sc.Text()
		if m := nsStartMarker.FindStringSubmatch(line); m != nil {
			startN, _ = strconv.Atoi(m[1])
			startAt, _ = time.Parse(time.RFC3339Nano, m[2])
			continue
		}
		switch {
		case nsStarted.MatchString(line):
			starts = append(starts, nsStartOf(line))
		case nsDenied.MatchString(line):
			d := nsDenial{line: line, restarted: startN > 1, sinceStart: -1}
			if at, ok := nsLineTime(line); ok && !startAt.IsZero() {
				d.sinceStart = at.Sub(startAt)
			}
			denied = append(denied, d)
		}
	}
	return starts, denied, sc.Err()
}

// nsStartOf reads tls, tls_allow_plaintext and acl from a text (key=value)
// or JSON log line; a missing key reads as "".
func nsStartOf(line string) nsStart {
	if strings.HasPrefix(line, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			s := func(k string) string {
				if v, ok := m[k]; ok {
					return fmt.Sprint(v)
				}
				return ""
			}
			return nsStart{tls: s("tls"), plaintext: s("tls_allow_plaintext"), acl: s("acl")}
		}
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return nsStart{tls: kv["tls"], plaintext: kv["tls_allow_plaintext"], acl: kv["acl"]}
}
