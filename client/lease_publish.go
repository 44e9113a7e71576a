package client

import (
	"os"
	"sync"
	"time"

	"github.com/claimd/claimd/internal/coalesce"
	"github.com/claimd/claimd/internal/leasefile"
	"github.com/claimd/claimd/structs"
)

// leasePublisher keeps the node lease file (internal/leasefile) current:
// the deadline after every renewal, the claims after every change to what
// this node holds. `claimd exec` and `claimd keeper` read it and stop the
// writers when the deadline passes, so the fence holds when this process
// does not (crashed, hung, paused, stopped for an upgrade).
//
// The deadline only moves on a renewal, anchored at the heartbeat's send
// on CLOCK_BOOTTIME: a publish that comes late (the agent was paused
// between the answer and the write) writes a deadline already past, never
// a fresh one. A restarted agent keeps the deadline its predecessor
// published until it renews: its start grace is its own, not the file's.
type leasePublisher struct {
	a      *Agent
	path   string
	bootID string

	mu       sync.Mutex
	fenceAt  int64 // CLOCK_BOOTTIME ns; 0: never renewed
	deadline int64
	// stopping marks claims whose unmount has begun (alloc/volume keys).
	stopping map[string]bool
	failed   bool // the last write failed (logged once per failure run)
	// file runs write; changes made together share a write.
	file *coalesce.Writer
}

func newLeasePublisher(a *Agent) *leasePublisher {
	p := &leasePublisher{a: a, path: leasefile.Path(a.cfg.DataDir), bootID: leasefile.BootID(), stopping: map[string]bool{}}
	p.file = coalesce.NewLinger(p.write, fileLinger)
	// The deadline a previous run of this agent published on this boot
	// still stands until this run renews.
	if f, err := leasefile.Read(p.path); err == nil && f.BootID == p.bootID && f.NodeID == a.ident.ID {
		p.fenceAt, p.deadline = f.FenceAt, f.Deadline
	}
	return p
}

// renewed moves the deadline after a renewal of a heartbeat sent at
// sentBoot (CLOCK_BOOTTIME) with the lease length that counts.
func (p *leasePublisher) renewed(sentBoot int64, length time.Duration) {
	l := p.a.lease
	deadline := sentBoot + int64(l.clock.realDuration(structs.FenceDeadline(length)))
	fenceAt := deadline - int64(l.clock.realDuration(l.fenceBudget()))
	p.mu.Lock()
	if deadline > p.deadline {
		p.deadline, p.fenceAt = deadline, fenceAt
	}
	p.mu.Unlock()
	p.publish()
}

// markStopping says the unmount of a claim has begun: its workload must
// stop now (claimd exec ends it). Published at once.
func (p *leasePublisher) markStopping(allocID, volumeID string) {
	p.mu.Lock()
	p.stopping[allocID+"/"+volumeID] = true
	p.mu.Unlock()
	p.publish()
}

// deadlines is the published fence start and deadline (CLOCK_BOOTTIME ns).
func (p *leasePublisher) deadlines() (fenceAt, deadline int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenceAt, p.deadline
}

// publish returns once the file shows the current deadline and held
// claims (a write begun after this call has ended).
func (p *leasePublisher) publish() { _ = p.file.Flush() }

// write writes the file from the current deadline and held claims.
func (p *leasePublisher) write() error {
	held := p.a.held.list()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := &leasefile.File{NodeID: p.a.ident.ID, BootID: p.bootID, AgentPID: os.Getpid(), Written: leasefile.Now(),
		Lease: p.a.lease.length, FenceAt: p.fenceAt, Deadline: p.deadline}
	live := map[string]bool{}
	for _, c := range held {
		live[c.key()] = true
		f.Claims = append(f.Claims, leasefile.Claim{AllocID: c.AllocID, VolumeID: c.VolumeID, MountPath: c.MountPath,
			ReadOnly: c.ReadOnly, NodeLost: string(c.NodeLost), Stopping: p.stopping[c.key()]})
	}
	for k := range p.stopping {
		if !live[k] {
			delete(p.stopping, k) // unmounted: gone from the file
		}
	}
	if err := leasefile.Write(p.path, f); err != nil {
		if !p.failed {
			p.a.logger.Error("could not write the node lease file: claimd exec and the keeper will take the lease as lost", "path", p.path, "error", err)
		}
		p.failed = true
		return err
	}
	p.failed = false
	return nil
}
