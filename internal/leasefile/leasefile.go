// Package leasefile is the node lease as the agent publishes it for the
// processes that must stop writing when the agent cannot renew it:
// `claimd exec` (a workload claimd starts) and `claimd keeper` (the fence
// command for workloads it does not). Those processes outlive the agent,
// so the lease must too: the agent writes the file after every renewal
// and every change to what it holds, and a reader that finds the deadline
// passed, the file from another boot, or the file unreadable, takes the
// lease as lost. An agent that crashed, hangs, is paused or is cut off
// stops writing, and its lease runs out in the file as it does on the
// servers.
//
// Deadlines are CLOCK_BOOTTIME readings: one clock for every process on
// the machine, monotonic (a wall clock step changes nothing), and it keeps
// counting while the machine is suspended, as the servers' clocks do.
package leasefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Name is the file's name in the agent's data dir.
const Name = "node-lease.json"

// Version of the format; a reader refuses another.
const Version = 1

// File is the published lease.
type File struct {
	Version int    `json:"version"`
	NodeID  string `json:"node_id"`
	// BootID identifies the boot the deadlines count in
	// (/proc/sys/kernel/random/boot_id): after a reboot they mean nothing.
	BootID string `json:"boot_id"`
	// AgentPID is the agent that wrote the file (for the log only).
	AgentPID int `json:"agent_pid"`
	// Written is when the file was written (CLOCK_BOOTTIME, ns).
	Written int64 `json:"written_ns"`
	// Lease is the node lease the agent holds (0: none; no claim here then
	// has a deadline, only fence-policy claims ever do).
	Lease time.Duration `json:"lease"`
	// FenceAt is when workloads of fence-policy claims must start to stop
	// (CLOCK_BOOTTIME, ns): the agent's own fence starts then. 0: the
	// lease was never renewed (a fence-policy workload may not run).
	FenceAt int64 `json:"fence_at_ns"`
	// Deadline is when they must have stopped: after it, a leader may
	// take the lease as run out and give the volume to another node.
	Deadline int64 `json:"deadline_ns"`
	// Claims are the volumes mounted here, as the agent holds them.
	Claims []Claim `json:"claims"`
}

// Claim is one volume mounted on this node for an allocation.
type Claim struct {
	AllocID   string `json:"alloc_id"`
	VolumeID  string `json:"volume_id"`
	MountPath string `json:"mount_path"`
	ReadOnly  bool   `json:"read_only"`
	// NodeLost is the policy the claim was taken under: only "fence"
	// claims stop at the lease's deadline; the others stop when the agent
	// says so (Stopping, or the claim gone from the file).
	NodeLost string `json:"node_lost"`
	// Stopping: the agent is unmounting the volume (the allocation
	// stopped, the servers released the claim, or a fence): its workload
	// must stop now.
	Stopping bool `json:"stopping,omitempty"`
}

// Fenced reports whether claims under the fence policy must stop.
func (c Claim) Fenced() bool { return c.NodeLost == "fence" }

// Now reads CLOCK_BOOTTIME in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Every Linux since 2.6.39 has it; without it nothing here holds.
		panic(fmt.Sprintf("leasefile: CLOCK_BOOTTIME: %v", err))
	}
	return ts.Nano()
}

// BootID is this boot's ID ("" where the kernel does not say).
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Path is the lease file of the agent whose data dir is dir.
func Path(dataDir string) string { return filepath.Join(dataDir, Name) }

// Write replaces the file at path atomically (a reader sees the old file
// or the new one, never a part). It is not synced: the deadlines mean
// nothing after a crash of the machine (a new boot), and between processes
// the page cache is the file.
func Write(path string, f *File) error {
	f.Version = Version
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// Readable by the workloads' users: IDs and paths, never a secret.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Read reads the file at path.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("lease file %s: %w", path, err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("lease file %s: version %d, this claimd reads %d", path, f.Version, Version)
	}
	return &f, nil
}

// Verdict is what a reader may conclude about one claim at one moment.
type Verdict int

const (
	// Hold: the workload may go on writing.
	Hold Verdict = iota
	// Stop: the agent is unmounting the volume, or no longer holds it.
	Stop
	// Fence: the lease cannot be shown live (deadline passed, another
	// boot): a fence-policy workload must stop now.
	Fence
)

func (v Verdict) String() string {
	switch v {
	case Hold:
		return "hold"
	case Stop:
		return "stop"
	default:
		return "fence"
	}
}

// Judge decides for the claim (alloc, volume) at CLOCK_BOOTTIME now, on
// this boot. f nil means the file could not be read: a fence-policy claim
// is fenced (the lease cannot be shown live); any other keeps what it was
// last judged, which the caller passes as fencePolicy=false → Hold.
func Judge(f *File, allocID, volumeID string, fencePolicy bool, now int64, bootID string) Verdict {
	if f == nil {
		if fencePolicy {
			return Fence
		}
		return Hold
	}
	if f.BootID != bootID {
		return Fence
	}
	c, ok := f.Claim(allocID, volumeID)
	if !ok || c.Stopping {
		return Stop
	}
	if c.Fenced() && (f.FenceAt == 0 || now >= f.FenceAt) {
		return Fence
	}
	return Hold
}

// Claim finds a claim by allocation and volume ("" volume: the
// allocation's only claim, or its first).
func (f *File) Claim(allocID, volumeID string) (Claim, bool) {
	for _, c := range f.Claims {
		if c.AllocID == allocID && (volumeID == "" || c.VolumeID == volumeID) {
			return c, true
		}
	}
	return Claim{}, false
}

// Remaining is how long fence-policy workloads may still write, at now
// (negative once they must stop).
func (f *File) Remaining(now int64) time.Duration {
	return time.Duration(f.FenceAt - now)
}
