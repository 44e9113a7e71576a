package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// The floods of issue 38 items 4 and 5, against the leader of a secured
// three-server cluster (real processes, production Raft timings).
const (
	// querySessions x queriesPerSession blocking Volume.List queries with a
	// read-only token: the issue's 21,000 over 30 sessions.
	querySessions     = 30
	queriesPerSession = 700
	queryStreams      = 10 // streams per session, the calls spread over them
	// queryFloodFor is how long the attacker keeps asking.
	queryFloodFor = 15 * time.Second
	// registerAttempts new nodes with fingerprints as large as allowed,
	// from registerWorkers at once, with a client certificate and no token.
	registerAttempts = 300
	registerWorkers  = 10
	// issueSizedAttempts new nodes with the issue's fingerprints (512 KiB).
	issueSizedAttempts = 20
	// writeP99Limit is the legitimate writer's p99 during a flood.
	writeP99Limit = time.Second
)

// TestFlood_BlockingQueriesAndRegistrations: a read-only token parks
// 21,000 blocking Volume.List queries over 30 sessions on the leader
// (asking again when a refusal's hint says, and at once after each
// answer, as a blocking client does); then a client certificate with
// no token registers 300 new nodes with the largest fingerprints allowed
// as fast as it can, and 20 with the fingerprints of the issue (64+64
// plugins of 4 KiB). Throughout, an operator registers a volume every
// 100 ms through the leader (each write wakes the parked lists). Each flood: no server's RSS grows by more than
// 200 MB, no election, the writer's p99 stays under a second; parked
// queries stay within the per-token bound and the rest are refused with a
// retry-after hint; new nodes come at the certificate's rate, the rest are
// refused (and the issue's fingerprints are refused as invalid). The
// query attacker is a separate process (testdata/queryflood) built
// without the race detector.
func TestFlood_BlockingQueriesAndRegistrations(t *testing.T) {
	fc := startFloodCluster(t)
	ctx := harness.Ctx(t, 3*time.Minute)
	mgmt := fc.client(t, fc.leader)
	// Something to list: 200 volumes (a list of 50 KB).
	var vols []*structs.Volume
	for i := range 200 {
		vols = append(vols, testVolume(fmt.Sprintf("listed-%03d", i)))
	}
	if _, err := mgmt.RegisterVolumes(ctx, vols...); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.ACLPolicyApply(ctx, "read-only", "", "volume { policy = \"read\" }\nnode { policy = \"read\" }"); err != nil {
		t.Fatal(err)
	}
	reader, err := mgmt.ACLTokenCreate(ctx, "reader", structs.ACLTokenClient, []string{"read-only"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The reader's token must be known on the leader before the flood.
	harness.WaitFor(t, 10*time.Second, func() error {
		cl, err := api.NewClient(api.Config{Addresses: []string{fc.leader}, TLS: fc.pki.CLIConfig(t), Token: reader.SecretID, Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		_, _, err = cl.Volumes(harness.Ctx(t, 5*time.Second), "", structs.QueryOptions{})
		return err
	})
	w := startFloodWatch(t, fc)

	t.Run("blocking queries with a read-only token", func(t *testing.T) {
		// The queries wait for the next change after the current one, as
		// the issue's parked queries did.
		readerCl, err := api.NewClient(api.Config{Addresses: []string{fc.leader}, TLS: fc.pki.CLIConfig(t), Token: reader.SecretID, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer readerCl.Close()
		_, meta, err := readerCl.Volumes(harness.Ctx(t, 5*time.Second), "", structs.QueryOptions{AllowStale: true})
		if err != nil {
			t.Fatal(err)
		}
		start := meta.Index
		tool := floodTool(t)
		w.begin(t)
		// The attacker is its own process (testdata/queryflood), built
		// without the race detector: in this process its bookkeeping of
		// thousands of calls took more CPU than the server it attacked.
		cmd := exec.Command(tool, "-addr", fc.leader, "-ca", fc.pki.CAFile,
			"-cert", fc.pki.CertFile[tlsutil.RoleCLI], "-key", fc.pki.KeyFile[tlsutil.RoleCLI], "-token", reader.SecretID,
			"-sessions", fmt.Sprint(querySessions), "-per-session", fmt.Sprint(queriesPerSession), "-streams", fmt.Sprint(queryStreams),
			"-index", fmt.Sprint(start), "-for", queryFloodFor.String())
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		maxWaiting := int64(0)
		leaderCl := fc.client(t, fc.leader)
		deadline := time.Now().Add(queryFloodFor - time.Second)
		for time.Now().Before(deadline) {
			if rt, err := leaderCl.Runtime(harness.Ctx(t, 5*time.Second)); err == nil {
				maxWaiting = max(maxWaiting, rt.QueriesWaiting)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("queryflood: %v: %s", err, errOut.String())
		}
		w.end(t)
		var c struct {
			Answered, Refused, Hinted, Other int64
			FirstOther                       string
		}
		if err := json.Unmarshal([]byte(out.String()), &c); err != nil {
			t.Fatalf("queryflood output %q: %v", out.String(), err)
		}
		t.Logf("%d x %d blocking Volume.List: %d answered, %d refused (%d with a retry-after hint), %d other errors (first %q); most parked on the leader at once %d",
			querySessions, queriesPerSession, c.Answered, c.Refused, c.Hinted, c.Other, c.FirstOther, maxWaiting)
		if c.Refused == 0 || c.Hinted != c.Refused {
			t.Errorf("refusals exp: many, every one with a retry-after hint got: %d refused, %d with a hint", c.Refused, c.Hinted)
		}
		if c.Other > 0 {
			t.Errorf("answers exp: data or unavailable got: %d others, first %q", c.Other, c.FirstOther)
		}
		// The one token's bound, plus the operator's own reads.
		if maxWaiting > 32+4 {
			t.Errorf("queries parked on the leader at once exp: <= 32 (the per-token bound) got: %d", maxWaiting)
		}
		if c.Answered == 0 {
			t.Errorf("answered blocking queries exp: some (those within the bound) got: 0")
		}
		if rt, err := leaderCl.Runtime(harness.Ctx(t, 10*time.Second)); err != nil || rt.QueriesRefused == 0 {
			t.Errorf("Status.Runtime QueriesRefused exp: > 0 got: %+v %v", rt, err)
		}
	})

	t.Run("new nodes with a client certificate and no token", func(t *testing.T) {
		w.begin(t)
		sess := dialFloodAs(t, fc, tlsutil.RoleClient)
		cl := rpc.WrapSession(sess)
		var admitted, limited, invalid, other atomic.Int64
		var firstOther atomic.Value
		began := time.Now()
		next := atomic.Int64{}
		var wg sync.WaitGroup
		for range registerWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= registerAttempts+issueSizedAttempts {
						return
					}
					var node *structs.Node
					if i < registerAttempts {
						node = largestAllowedNode(fmt.Sprintf("flood-%03d", i))
					} else {
						node = issueSizedNode(fmt.Sprintf("huge-%03d", i))
					}
					req := &structs.NodeRegisterRequest{Node: node}
					err := cl.Call(harness.Ctx(t, 10*time.Second), "Node.Register", req, &structs.NodeUpdateResponse{})
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, structs.ErrInvalid):
						invalid.Add(1)
					case errors.Is(err, structs.ErrUnavailable):
						if _, ok := structs.RetryAfter(err); ok {
							limited.Add(1)
							continue
						}
						fallthrough
					default:
						other.Add(1)
						firstOther.CompareAndSwap(nil, err.Error())
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(began)
		// Two seconds with the writer going on after the last attempt.
		time.Sleep(2 * time.Second)
		w.end(t)
		t.Logf("%d new nodes (largest allowed fingerprints) + %d (the issue's) in %v: %d admitted, %d refused by the rate, %d invalid, %d other (first %v)",
			registerAttempts, issueSizedAttempts, took.Round(time.Millisecond), admitted.Load(), limited.Load(), invalid.Load(), other.Load(), firstOther.Load())
		// The burst, then two a second (endpoints/register_limits.go).
		if most := int64(32 + 2*took.Seconds() + 2); admitted.Load() > most || admitted.Load() < 32 {
			t.Errorf("new nodes admitted exp: 32..%d (a burst of 32, then 2 a second over %v) got: %d", most, took, admitted.Load())
		}
		if limited.Load() == 0 || invalid.Load() != issueSizedAttempts || other.Load() != 0 {
			t.Errorf("refusals exp: rate refusals with a hint, %d invalid, no other got: %d, %d, %d (%v)", issueSizedAttempts, limited.Load(), invalid.Load(), other.Load(), firstOther.Load())
		}
		nodes, _, err := mgmt.Nodes(harness.Ctx(t, 10*time.Second), structs.QueryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var certs []string
		for _, n := range nodes {
			if strings.HasPrefix(n.ID, "flood-") && !slices.Contains(certs, n.RegisteredCert) {
				certs = append(certs, n.RegisteredCert)
			}
		}
		if len(certs) != 1 || len(certs[0]) != 64 {
			t.Errorf("certificate recorded on the admitted nodes exp: one SHA-256 got: %q", certs)
		}
		// Counted by the leader (the one that refuses), whichever it is.
		var counted uint64
		for _, a := range fc.addrs {
			if rt, err := fc.client(t, a).Runtime(harness.Ctx(t, 10*time.Second)); err == nil {
				counted += rt.RegistrationsRefused
			}
		}
		if counted != uint64(limited.Load()) {
			t.Errorf("Status.Runtime RegistrationsRefused over the servers exp: %d got: %d", limited.Load(), counted)
		}
	})
}

var (
	floodToolOnce sync.Once
	floodToolPath string
	floodToolErr  error
)

// floodTool builds testdata/queryflood once (without the race detector).
func floodTool(t *testing.T) string {
	t.Helper()
	floodToolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "claimd-queryflood-")
		if err != nil {
			floodToolErr = err
			return
		}
		floodToolPath = filepath.Join(dir, "queryflood")
		cmd := exec.Command("go", "build", "-o", floodToolPath, "./testdata/queryflood")
		if out, err := cmd.CombinedOutput(); err != nil {
			floodToolErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if floodToolErr != nil {
		t.Fatal(floodToolErr)
	}
	return floodToolPath
}

// largestAllowedNode has fingerprints as large as structs.Node.ValidateSize
// allows: 16 node plugins and one controller plugin, 16 KiB in all.
func largestAllowedNode(id string) *structs.Node {
	n := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{}}
	for i := range structs.MaxNodePluginsPerKind {
		pid := fmt.Sprintf("bogus-%02d", i)
		n.CSINodePlugins[pid] = &structs.CSIInfo{PluginID: pid, Healthy: true, ExternalNodeID: id,
			HealthDescription: strings.Repeat("h", 700), AccessibleTopology: map[string]string{"zone": strings.Repeat("z", 200)}}
	}
	return n
}

// issueSizedNode is what issue 38 registered: 64 node and 64 controller
// plugins, each with 4 KiB of text.
func issueSizedNode(id string) *structs.Node {
	n := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id, Status: structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{}, CSIControllerPlugins: map[string]*structs.CSIInfo{}}
	for i := range 64 {
		pid := fmt.Sprintf("bogus-%02d", i)
		n.CSINodePlugins[pid] = &structs.CSIInfo{PluginID: pid, HealthDescription: strings.Repeat("h", 4000)}
		n.CSIControllerPlugins[pid] = &structs.CSIInfo{PluginID: pid, HealthDescription: strings.Repeat("h", 4000)}
	}
	return n
}

// dialFloodAs opens a yamux session to the leader over TLS with role's
// certificate.
func dialFloodAs(t *testing.T, fc *floodCluster, role tlsutil.Role) *yamux.Session {
	t.Helper()
	raw, err := net.DialTimeout("tcp", fc.leader, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(rpc.HandshakeTimeout))
	if _, err := raw.Write([]byte{byte(rpc.ProtoTLS)}); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, fc.pki.Configurator(t, role).OutgoingConfig())
	if err := tc.Handshake(); err != nil {
		t.Fatalf("%s handshake exp: accepted got: %v", role, err)
	}
	if _, err := tc.Write([]byte{byte(rpc.ProtoMux)}); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Time{})
	sess, err := yamux.Client(tc, rpc.YamuxConfig(hclog.NewNullLogger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// queryFloodWatch measures, from begin to end, every server's RSS peak against
// its figure before the first flood, elections, and a legitimate writer's
// latency: a volume registered through the leader every 50 ms.
type queryFloodWatch struct {
	fc   *floodCluster
	pids []int
	idle []int64
	mgmt *api.Client

	stop chan struct{}
	wg   sync.WaitGroup
	peak []atomic.Int64
	mu   sync.Mutex
	lat  []time.Duration
	errs []error
	cand int
}

func startFloodWatch(t *testing.T, fc *floodCluster) *queryFloodWatch {
	t.Helper()
	w := &queryFloodWatch{fc: fc, mgmt: fc.client(t, fc.leader)}
	for _, a := range fc.addrs {
		pid := pidListeningOn(t, a)
		r, err := rssBytes(pid)
		if err != nil {
			t.Fatal(err)
		}
		w.pids, w.idle = append(w.pids, pid), append(w.idle, r)
	}
	w.peak = make([]atomic.Int64, len(w.pids))
	return w
}

func (w *queryFloodWatch) begin(t *testing.T) {
	t.Helper()
	w.stop = make(chan struct{})
	w.lat, w.errs = nil, nil
	for i := range w.peak {
		w.peak[i].Store(0)
	}
	w.cand = candidateLines(w.fc.procs)
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			for i, pid := range w.pids {
				if r, err := rssBytes(pid); err == nil && r > w.peak[i].Load() {
					w.peak[i].Store(r)
				}
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := w.mgmt.RegisterVolumes(ctx, testVolume(fmt.Sprintf("writer-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), i)))
			cancel()
			w.mu.Lock()
			w.lat = append(w.lat, time.Since(began))
			if err != nil {
				w.errs = append(w.errs, err)
			}
			w.mu.Unlock()
		}
	}()
}

func (w *queryFloodWatch) end(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	lat := slices.Clone(w.lat)
	errs := w.errs
	w.mu.Unlock()
	slices.Sort(lat)
	var p99, worst time.Duration
	if len(lat) > 0 {
		p99, worst = lat[len(lat)*99/100], lat[len(lat)-1]
	}
	var grew []string
	for i, pid := range w.pids {
		g := w.peak[i].Load() - w.idle[i]
		grew = append(grew, fmt.Sprintf("%s %d->%d MB", w.fc.addrs[i], w.idle[i]>>20, w.peak[i].Load()>>20))
		if g > floodRSSLimit {
			t.Errorf("server %s (pid %d) RSS growth exp: <= %d MB got: %d MB", w.fc.addrs[i], pid, floodRSSLimit>>20, g>>20)
		}
	}
	t.Logf("RSS (idle before the first flood -> peak): %s; writer: %d writes, p99 %v, slowest %v, %d errors",
		strings.Join(grew, ", "), len(lat), p99, worst, len(errs))
	if len(lat) < 20 {
		t.Errorf("writes during the flood exp: >= 20 got: %d", len(lat))
	}
	if p99 > writeP99Limit {
		t.Errorf("writer p99 during the flood exp: < %v got: %v", writeP99Limit, p99)
	}
	if len(errs) > 0 {
		t.Errorf("writes during the flood exp: no error got: %d, first %v", len(errs), errs[0])
	}
	if n := candidateLines(w.fc.procs) - w.cand; n != 0 {
		t.Errorf("elections during the flood exp: 0 got: %d", n)
	}
	if l, err := w.mgmt.Leader(harness.Ctx(t, 10*time.Second)); err != nil || l != w.fc.leader {
		t.Errorf("leader after the flood exp: %s got: %q %v", w.fc.leader, l, err)
	}
}
