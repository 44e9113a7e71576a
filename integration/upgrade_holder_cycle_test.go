package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// release is how one stopped allocation's claim was released, read back
// from the volume's freed claims (Volume.Released keeps each claim's steps,
// every step with the Raft index of the entry that made it).
type release struct {
	alloc, volume string
	claim         *structs.Claim
	// byHolder: the claim reached node-detached in the very entry that
	// released it (its unpublishing step's index), which only an entry
	// that honoured the agent's DetachedVolumes does. The servers' way
	// reaches node-detached (or freed) in a later checkpoint, after the
	// release watcher's NodeDetach.
	byHolder bool
	// serverDetaches: the agent's log lines for a NodeDetachVolume the
	// servers sent it for this allocation.
	serverDetaches int
	// freedAt is the index of the entry that freed the claim.
	freedAt uint64
}

func (r release) String() string {
	way := "servers' node detach"
	if r.byHolder {
		way = "node-detached in the release entry"
	}
	var steps []string
	for _, s := range r.claim.Steps {
		steps = append(steps, fmt.Sprintf("%s@%d", s.State, s.Index))
	}
	return fmt.Sprintf("%s/%s: %s (%s; %d server NodeDetach in the agent log)", r.alloc, r.volume, way, strings.Join(steps, " "), r.serverDetaches)
}

// stepIndex is the index of the claim's step in state s (0: none).
func stepIndex(c *structs.Claim, s structs.ClaimState) uint64 {
	for _, st := range c.Steps {
		if st.State == s {
			return st.Index
		}
	}
	return 0
}

// agentNodeDetaches counts the agent's "node detached volume" log lines
// for alloc: client/csi_endpoint.go logs one for every NodeDetachVolume
// the servers send (the agent's own unmount at a stop does not log it).
func agentNodeDetaches(out, alloc string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "node detached volume") && strings.Contains(line+" ", "alloc="+alloc+" ") {
			n++
		}
	}
	return n
}

// cycle places allocation id on the agent's node with volume vol, waits
// until the agent runs it (claimed and mounted), stops it, and waits until
// the volume holds no claim and its freed claims include this one. Every
// call is retried until the servers acknowledge it.
func (e *mixedEnv) cycle(t *testing.T, id, vol string) release {
	t.Helper()
	harness.WaitFor(t, 30*time.Second, func() error {
		_, err := e.c.PlaceAllocs(harness.Ctx(t, 10*time.Second), &structs.Alloc{ID: id, NodeID: e.nodeID,
			Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}})
		return err
	})
	harness.WaitFor(t, 30*time.Second, func() error {
		a, _, err := e.c.Alloc(harness.Ctx(t, 10*time.Second), id, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a == nil || a.ClientStatus != structs.AllocClientRunning {
			return fmt.Errorf("alloc %s exp: running got: %+v", id, a)
		}
		return nil
	})
	harness.WaitFor(t, 30*time.Second, func() error {
		_, err := e.c.StopAllocs(harness.Ctx(t, 10*time.Second), id)
		return err
	})
	var r release
	harness.WaitFor(t, 30*time.Second, func() error {
		v, _, err := e.c.Volume(harness.Ctx(t, 10*time.Second), vol, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if all := v.AllClaims(); len(all) != 0 {
			return fmt.Errorf("volume %s exp: no claim once %s stopped got: %s", vol, id, describeClaims(all))
		}
		for _, c := range v.Released {
			if c.AllocID == id {
				u := stepIndex(c, structs.ClaimStateUnpublishing)
				r = release{alloc: id, volume: vol, claim: c, freedAt: stepIndex(c, structs.ClaimStateFreed),
					byHolder: u != 0 && stepIndex(c, structs.ClaimStateNodeDetached) == u}
				return nil
			}
		}
		return fmt.Errorf("volume %s exp: %s among its freed claims got: %d others", vol, id, len(v.Released))
	})
	r.serverDetaches = agentNodeDetaches(e.agent.Output(), id)
	return r
}
