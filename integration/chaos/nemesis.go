package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/claimd/claimd/structs"
)

// A nemesis is one fault: start puts it in force and returns how to undo
// it. Both run on the test goroutine, one fault at a time.
type nemesis struct {
	name string
	// minOn is the least time the fault stays on (a paused leader must
	// stay paused longer than the election timeout).
	minOn time.Duration
	start func(n *nemesisEnv) (undo func() error, desc string, err error)
	// during, if set, runs while the fault is on, until ctx ends.
	during func(ctx context.Context, n *nemesisEnv)
}

type nemesisEnv struct {
	c   Cluster
	rng *rand.Rand
	// stats the nemeses keep (transfers that landed mid-detach, …).
	notes map[string]int
	// observe is the client the nemeses read state with.
	observe func() clientAPI
	// tamper edits the storage behind claimd's back (tamper.go).
	tamper *tamperer
}

// clientAPI is what the nemeses need from an api.Client.
type clientAPI interface {
	Volumes(ctx context.Context, pluginID string, q structs.QueryOptions) ([]*structs.Volume, structs.QueryMeta, error)
	TransferLeadership(ctx context.Context, id string) error
}

// leaderOf waits (bounded) for a leader and returns its name.
func (n *nemesisEnv) leader() (string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l := n.c.Leader(ctx)
		cancel()
		if l != "" {
			return l, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no leader within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *nemesisEnv) others(than ...string) []string {
	var out []string
	for _, s := range n.c.Servers() {
		if !slices.Contains(than, s) {
			out = append(out, s)
		}
	}
	return out
}

func (n *nemesisEnv) pick(from []string) string { return from[n.rng.IntN(len(from))] }

func heal(c Cluster) func() error { return c.Heal }

// nemeses is the catalogue, one entry per fault of issue 6 item 2.
func nemeses() []nemesis {
	return []nemesis{
		{name: "isolate-leader", start: func(n *nemesisEnv) (func() error, string, error) {
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			return heal(n.c), "isolate " + l, n.c.Isolate(l)
		}},
		{name: "isolate-follower", start: func(n *nemesisEnv) (func() error, string, error) {
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			f := n.pick(n.others(l))
			return heal(n.c), "isolate " + f, n.c.Isolate(f)
		}},
		{name: "bridge", start: func(n *nemesisEnv) (func() error, string, error) {
			// The leader at one end: it keeps a majority through the
			// bridge, while the far end cannot hear it.
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			rest := n.others(l)
			n.rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
			return heal(n.c), fmt.Sprintf("%s–%s–%s, %s/%s cut", l, rest[0], rest[1], l, rest[1]), n.c.Bridge(l, rest[0], rest[1])
		}},
		{name: "one-way", start: func(n *nemesisEnv) (func() error, string, error) {
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			f := n.pick(n.others(l))
			if n.rng.IntN(2) == 0 {
				l, f = f, l
			}
			return heal(n.c), fmt.Sprintf("drop SYN %s→%s", l, f), n.c.DropSYN(l, f)
		}},
		{name: "kill-leader", start: func(n *nemesisEnv) (func() error, string, error) {
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			return func() error { return n.c.Restart(l) }, "kill -9 " + l, n.c.Kill(l)
		}},
		{name: "kill-random", start: func(n *nemesisEnv) (func() error, string, error) {
			s := n.pick(n.c.Servers())
			return func() error { return n.c.Restart(s) }, "kill -9 " + s, n.c.Kill(s)
		}},
		{name: "pause-leader", minOn: 2 * time.Second, start: func(n *nemesisEnv) (func() error, string, error) {
			l, err := n.leader()
			if err != nil {
				return nil, "", err
			}
			return func() error { return n.c.Resume(l) }, "SIGSTOP " + l, n.c.Pause(l)
		}},
		{name: "pause-leader-at-storage-call", minOn: 16 * time.Second, start: pauseAtStorageCall},
		{name: "isolate-worker", start: func(n *nemesisEnv) (func() error, string, error) {
			ws := n.c.Workers()
			w := ws[n.rng.IntN(len(ws))].Name
			return heal(n.c), "cut " + w + " from every server", n.c.IsolateWorker(w)
		}},
		{name: "kill-plugin", start: func(n *nemesisEnv) (func() error, string, error) {
			ws := n.c.Workers()
			w := ws[n.rng.IntN(len(ws))].Name
			return func() error { return n.c.RestartPlugin(w) }, "kill node plugin of " + w, n.c.KillPlugin(w)
		}},
		{name: "latency", start: func(n *nemesisEnv) (func() error, string, error) {
			d := time.Duration(20+n.rng.IntN(61)) * time.Millisecond
			return func() error { return n.c.SetLatency(0) }, fmt.Sprintf("+%s on server links", d), n.c.SetLatency(d)
		}},
		{name: "transfer-mid-detach", start: func(n *nemesisEnv) (func() error, string, error) {
			return func() error { return nil }, "leadership transfers while a claim is being released", nil
		}, during: transferMidDetach},
		{name: "tamper-storage", start: func(n *nemesisEnv) (func() error, string, error) {
			return func() error { return n.tamper.heal(n.observe(), false) },
				"attachments added and removed on the storage behind claimd's back", nil
		}, during: tamperStorage},
	}
}

// errNoFaultPoints: the backend's servers cannot stop themselves at a
// storage call (in-process servers share one process).
var errNoFaultPoints = errors.New("no fault points on this backend")

// storagePauser is a backend whose servers can stop themselves exactly
// between deciding a storage call and making it (real processes with
// fault points: the netns backend).
type storagePauser interface {
	PauseAtStorageCall(server string, wait time.Duration) (bool, error)
}

// pauseAtStorageCall stops the leader at its next storage call (a
// publish, node detach or controller detach it has decided on) and keeps
// it stopped past a new leader's hold-off, so that the new leader frees
// and re-grants volumes meanwhile; resumed, the old leader must make no
// storage call (decision 46; the audit check sees one as S1 or S3). With
// no storage call within 10 s, or on a backend without fault points, it is
// a plain pause of the leader.
func pauseAtStorageCall(n *nemesisEnv) (func() error, string, error) {
	l, err := n.leader()
	if err != nil {
		return nil, "", err
	}
	undo := func() error { return n.c.Resume(l) }
	if sp, ok := n.c.(storagePauser); ok {
		stopped, err := sp.PauseAtStorageCall(l, 10*time.Second)
		switch {
		case errors.Is(err, errNoFaultPoints):
		case err != nil:
			return nil, "", err
		case stopped:
			n.notes["leaders stopped at a storage call"]++
			return undo, "SIGSTOP " + l + " at a storage call", nil
		default:
			n.notes["leaders paused with no storage call in flight"]++
		}
	}
	return undo, "SIGSTOP " + l, n.c.Pause(l)
}

// transferMidDetach waits for a claim that is being released (a past
// claim, between the node and the controller step or before them) and
// moves leadership at once, a few times while the fault is on.
func transferMidDetach(ctx context.Context, n *nemesisEnv) {
	for transfers := 0; transfers < 3 && ctx.Err() == nil; {
		cl := n.observe()
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		vols, _, err := cl.Volumes(qctx, "", structs.QueryOptions{})
		cancel()
		var mid string
		if err == nil {
			for _, v := range vols {
				for _, c := range v.PastClaims {
					if c.State == structs.ClaimStateUnpublishing || c.State == structs.ClaimStateNodeDetached {
						mid = fmt.Sprintf("%s/%s %s", v.ID, c.AllocID, c.State)
					}
				}
			}
		}
		if mid == "" {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = cl.TransferLeadership(tctx, "")
		cancel()
		if err == nil {
			transfers++
			n.notes["leadership transfers mid-detach"]++
		} else {
			n.notes["leadership transfers refused"]++
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// schedule lists the faults to run in order: every nemesis once, in a
// seeded order, then (long runs) more rounds until the duration is used.
type scheduled struct {
	n       nemesis
	on, off time.Duration
}

func schedule(rng *rand.Rand, duration time.Duration, short bool) []scheduled {
	all := nemeses()
	var out []scheduled
	var total time.Duration
	// Rounds of every nemesis in a fresh order; a long run stops adding
	// faults once the duration is planned, after at least one full round
	// (bounded: 10000 rounds).
	for round := 0; round < 10000; round++ {
		for _, i := range rng.Perm(len(all)) {
			var on, off time.Duration
			if short {
				on = 2500*time.Millisecond + time.Duration(rng.IntN(1000))*time.Millisecond
				off = 1500 * time.Millisecond
			} else {
				on = time.Duration(3+rng.IntN(13)) * time.Second
				off = time.Duration(2+rng.IntN(7)) * time.Second
			}
			on = max(on, all[i].minOn)
			out = append(out, scheduled{n: all[i], on: on, off: off})
			total += on + off
			if !short && round > 0 && total >= duration {
				return out
			}
		}
		if short {
			return out
		}
	}
	return out
}
