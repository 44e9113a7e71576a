// Package chaos runs claimd under faults and checks that it keeps its
// promises (S1-S8 and L1 in docs/architecture.md): linearizable
// claim/release/read histories per volume, never two nodes with one
// single-writer volume attached, ControllerUnpublish only after the node
// detach, ControllerPublish only for new claims, every past claim freed once
// the faults heal, identical state on every server, no acknowledged write
// lost, no panics.
//
// The workload, nemesis schedule and checkers are written against the
// Cluster interface, which two backends implement: an in-process one on
// the harness (real Raft, TCP on loopback, real gRPC plugins; runs without
// root) and one with real OS processes in network namespaces with nftables
// cuts (needs root).
package chaos

import (
	"context"
	"flag"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// Flags for long runs: go test ./integration/chaos -run Chaos -chaos.duration=30m
var (
	FlagDuration = flag.Duration("chaos.duration", 0, "length of the fault schedule (0 = the short CI schedule)")
	FlagSeed     = flag.Int64("chaos.seed", 0, "seed of the schedule and workload (0 = random, printed)")
	FlagOut      = flag.String("chaos.out", "", "directory for a failing run's history, visualisation and logs (default: a temp dir)")
)

// Worker is one client node: its agent and its node plugin.
type Worker struct {
	Name   string
	NodeID string
	// NodeAudit is the node plugin's audit log (JSON lines, hostdir format).
	NodeAudit string
}

// Cluster is a running claimd system the chaos run drives. Every method is
// safe for concurrent use; fault methods return once the fault is in force.
type Cluster interface {
	// Servers names the servers ("s1", "s2", "s3").
	Servers() []string
	// Client returns an API client bound to one server, dialling as the
	// workload's host does (so partitions apply to it as configured).
	Client(server string) *api.Client
	// WorkloadClient is Client with the workload's own credentials: when
	// ACLs are on, a token whose policy grants exactly what the workload
	// calls; otherwise the same as Client. Client stays the operator's
	// (setup, final reads, nemeses, checks).
	WorkloadClient(server string) *api.Client
	// Workers lists the client nodes; Controller is the controller
	// plugin's audit log.
	Workers() []Worker
	ControllerAudit() string
	// StorageRoot is the hostdir root every plugin shares: the storage
	// itself, which the tamper nemesis edits behind claimd's back.
	StorageRoot() string

	// Leader returns the name of the server that currently leads, or "".
	Leader(ctx context.Context) string

	// Network faults, all undone by Heal.
	Isolate(server string) error
	Bridge(a, b, c string) error // a–b and b–c up, a–c cut
	DropSYN(from, to string) error
	IsolateWorker(worker string) error // a client agent cut off from every server
	SetLatency(d time.Duration) error  // added to every server↔server link; 0 removes it
	Heal() error

	// Process faults.
	Kill(server string) error    // SIGKILL (in-process: abrupt stop)
	Restart(server string) error // start again on the same data dir
	Pause(server string) error   // SIGSTOP (in-process: isolate)
	Resume(server string) error
	KillPlugin(worker string) error
	RestartPlugin(worker string) error

	// Digest returns one server's state digest (S2 check).
	Digest(ctx context.Context, server string) (*structs.StateDigest, error)
	// Health reports whether any server process panicked or exceeded the
	// goroutine bound, with the evidence.
	Health() error
	// SaveLogs copies every process's logs into dir.
	SaveLogs(dir string) error
}
