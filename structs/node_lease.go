package structs

import (
	"fmt"
	"time"
)

// NodeLostPolicy is what the servers do with a volume's claims when the
// node holding them is lost (stops heartbeating). It is the volume spec's
// `node_lost` key (docs/architecture.md, node loss; decision 39).
type NodeLostPolicy string

const (
	// NodeLostWait (the default): the release waits until the node is back
	// and has unmounted, or an operator forces it.
	NodeLostWait NodeLostPolicy = "wait"
	// NodeLostFence: once the node's lease has certainly run out (see
	// LeaseExpiry), the node has fenced itself; the release records the
	// node as fenced, skips the node detach and goes on to the controller
	// detach.
	NodeLostFence NodeLostPolicy = "fence"
	// NodeLostManual: a lost node's claims are released only by an
	// operator's `volume detach`, never automatically, even when the node
	// comes back.
	NodeLostManual NodeLostPolicy = "manual"
)

// NodeLostPolicies lists the policies.
var NodeLostPolicies = []NodeLostPolicy{NodeLostWait, NodeLostFence, NodeLostManual}

// Valid reports whether p is a policy; the empty policy is wait.
func (p NodeLostPolicy) Valid() bool {
	return p == "" || p == NodeLostWait || p == NodeLostFence || p == NodeLostManual
}

// OrWait is p, or wait when p is empty (a volume registered without one).
func (p NodeLostPolicy) OrWait() NodeLostPolicy {
	if p == "" {
		return NodeLostWait
	}
	return p
}

// EffectiveNodeLost is the policy the release of claim c on volume v
// follows. The claim records the policy it was taken under, because the
// node fences (or not) by what it was told at claim time: fencing is
// effective only when both the claim and the volume's current spec say
// fence. Anything else is at least as careful: a volume re-registered to
// wait or manual takes effect at once, a volume re-registered to fence
// only for claims taken afterwards.
func EffectiveNodeLost(c *Claim, v *Volume) NodeLostPolicy {
	cp, vp := c.NodeLost.OrWait(), NodeLostWait
	if v != nil {
		vp = v.NodeLost.OrWait()
	}
	switch {
	case cp == NodeLostManual || vp == NodeLostManual:
		return NodeLostManual
	case cp == NodeLostFence && vp == NodeLostFence:
		return NodeLostFence
	default:
		return NodeLostWait
	}
}

// The lease argument (decision 39). A client agent's lease is renewed by a
// heartbeat answer from a leader that verified its leadership after it
// received the heartbeat; the agent measures from when it sent that
// heartbeat (send ≤ receive), on its monotonic clock. Every clock involved
// runs at a rate within LeaseClockDrift of real time.
//
//   - The agent must have stopped writing within lease·(1−ρ) of its own
//     clock after the send: at most `lease` of real time.
//   - A leader counts from the last heartbeat it received (a new leader
//     from when it took office, which is after every send an earlier
//     leader acknowledged: that leader's verification and the new leader's
//     election needed overlapping quorums), and takes the node's lease as
//     run out only after lease·(1+ρ) + LeaseMargin of its own clock: at
//     least `lease` of real time.
//
// So when the servers act on an expired lease, the node has been fenced
// for at least LeaseMargin/(1+ρ) of real time.
const (
	// LeaseClockDrift (ρ) bounds how far a clock's rate may be from real
	// time. Quartz clocks drift by parts per million; 5% covers a badly
	// slewed clock or a paused virtual machine's catch-up with a wide margin.
	LeaseClockDrift = 0.05
	// LeaseMargin is added on the servers' side on top of the drift
	// allowance: scheduling and the time between a timer firing and the
	// release acting.
	LeaseMargin = 2 * time.Second
	// MinNodeLease is the shortest lease an agent may hold: shorter leases
	// would fence a node on ordinary scheduling hiccups.
	MinNodeLease = 2 * time.Second
	// MaxNodeLease bounds how long a lost node's fence-policy volumes wait.
	MaxNodeLease = time.Hour
)

// LeaseExpiry is how long after the last heartbeat it received a leader
// waits before it takes a node's lease as run out.
func LeaseExpiry(lease time.Duration) time.Duration {
	return time.Duration(float64(lease)*(1+LeaseClockDrift)) + LeaseMargin
}

// FenceDeadline is how long after sending its last acknowledged heartbeat
// an agent has, on its own clock, to stop every fence-policy workload.
func FenceDeadline(lease time.Duration) time.Duration {
	return time.Duration(float64(lease) * (1 - LeaseClockDrift))
}

// ValidateNodeLease checks an agent's lease (0 = the agent holds none, and
// its fence-policy claims wait like wait-policy ones).
func ValidateNodeLease(field string, lease time.Duration) error {
	if lease == 0 {
		return nil
	}
	if lease < MinNodeLease || lease > MaxNodeLease {
		return Invalid(field, fmt.Sprintf("%s is not between %s and %s", lease, MinNodeLease, MaxNodeLease))
	}
	return nil
}

// NodeEligibility says whether new claims may be taken on a node.
type NodeEligibility string

const (
	NodeEligible   NodeEligibility = "eligible"
	NodeIneligible NodeEligibility = "ineligible"
)

// Valid reports whether e is one of the two; empty means eligible.
func (e NodeEligibility) Valid() bool { return e == "" || e == NodeEligible || e == NodeIneligible }

// FenceReport is what an agent fenced while it could not renew its lease,
// reported when it registers again (kept on the node until the next
// report). Nothing in it is secret: IDs and paths only.
type FenceReport struct {
	// At is when the agent began fencing (its wall clock).
	At time.Time `json:"at"`
	// LeaseRemaining was the lease left when fencing began.
	LeaseRemaining time.Duration   `json:"lease_remaining"`
	Volumes        []*FencedVolume `json:"volumes,omitempty"`
}

// FencedVolume is one claim the agent fenced.
type FencedVolume struct {
	AllocID  string `json:"alloc_id"`
	VolumeID string `json:"volume_id"`
	// HookOK: the fence command ran and exited 0 (true also when none is
	// configured).
	HookOK bool `json:"hook_ok"`
	// Unmounted: NodeUnpublish (and NodeUnstage when it was the last use)
	// succeeded or found nothing mounted.
	Unmounted bool `json:"unmounted"`
	// Error says what failed, if anything did.
	Error string `json:"error,omitempty"`
	// Done is when this volume's fence finished (agent's wall clock).
	Done time.Time `json:"done"`
}

const maxFencedVolumes = 256

// Validate bounds a report so one node cannot bloat the state.
func (r *FenceReport) Validate() error {
	if r == nil {
		return nil
	}
	if len(r.Volumes) > maxFencedVolumes {
		return Invalid("last_fence.volumes", fmt.Sprintf("has %d entries, at most %d allowed", len(r.Volumes), maxFencedVolumes))
	}
	for i, v := range r.Volumes {
		f := fmt.Sprintf("last_fence.volumes[%d]", i)
		if v == nil {
			return Invalid(f, "must not be null")
		}
		if err := ValidateID(f+".alloc_id", v.AllocID); err != nil {
			return err
		}
		if err := ValidateID(f+".volume_id", v.VolumeID); err != nil {
			return err
		}
		if len(v.Error) > maxFingerprintSz {
			return Invalid(f+".error", fmt.Sprintf("longer than %d bytes", maxFingerprintSz))
		}
	}
	return nil
}

// Copy returns a deep copy.
func (r *FenceReport) Copy() *FenceReport {
	if r == nil {
		return nil
	}
	c := *r
	c.Volumes = make([]*FencedVolume, len(r.Volumes))
	for i, v := range r.Volumes {
		vv := *v
		c.Volumes[i] = &vv
	}
	return &c
}

// NodeEligibilityRequest makes a node eligible or ineligible for new
// claims (the first step of a drain).
type NodeEligibilityRequest struct {
	NodeID      string
	Eligibility NodeEligibility
	WriteRequest
}

// Validate names the field at fault.
func (r *NodeEligibilityRequest) Validate() error {
	if err := ValidateID("node_id", r.NodeID); err != nil {
		return err
	}
	if r.Eligibility == "" || !r.Eligibility.Valid() {
		return Invalid("eligibility", fmt.Sprintf("%q is not %q or %q", r.Eligibility, NodeEligible, NodeIneligible))
	}
	return nil
}

// ReleasePath says how a past or released claim got past its node detach.
type ReleasePath string

const (
	ReleasePathPending    ReleasePath = ""            // not node-detached yet
	ReleasePathNodeDetach ReleasePath = "node-detach" // the node unmounted it
	ReleasePathFenced     ReleasePath = "fenced"      // the node's lease ran out; it fenced itself
	ReleasePathForced     ReleasePath = "forced"      // an operator's -force
)

// ReleasePath is how the claim's node detach was done (or skipped).
func (c *Claim) ReleasePath() ReleasePath {
	switch {
	case c.Fenced:
		return ReleasePathFenced
	case c.NodeDetachSkipped:
		return ReleasePathForced
	case c.State.Rank() >= ClaimStateNodeDetached.Rank():
		return ReleasePathNodeDetach
	}
	return ReleasePathPending
}
