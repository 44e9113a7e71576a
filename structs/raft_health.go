package structs

import (
	"encoding/json"
	"fmt"
	"time"
)

// RaftStats is one server's own view of its Raft log and of its leader:
// what Status.RaftStats answers to the leader's health checks.
type RaftStats struct {
	// LastContact is how long ago this server last heard from the leader:
	// 0 on the leader itself, negative when it never has.
	LastContact time.Duration
	// LastIndex and LastTerm are those of the newest entry in its log
	// (stored, not necessarily applied).
	LastIndex uint64
	LastTerm  uint64
	// AppliedIndex is the newest entry its state machine applied.
	AppliedIndex uint64
	// Version is the server's claimd build (version.Short); empty from a
	// server older than the field.
	Version string
	// Features are the log-entry features this server applies (a bit set
	// of Feature*): the leader writes an entry that needs one only once
	// every server has reported it. Zero from a server older than the
	// field.
	Features uint64 `codec:",omitempty"`
}

// FeatureHolderDetached: the server applies ClaimBatchDetachedRequestType
// and AllocClientUpdateDetachedRequestType.
const FeatureHolderDetached uint64 = 1 << 0

// EntryFeatures are the features this build applies.
const EntryFeatures = FeatureHolderDetached

// FeatureNames names the features in f, for operators
// (`claimd operator raft health`).
func FeatureNames(f uint64) []string {
	var out []string
	if f&FeatureHolderDetached != 0 {
		out = append(out, "holder-detached")
	}
	return out
}

// What the leader knows of a server's liveness (RaftServerHealth.Status).
const (
	// RaftServerAlive: the server answered the leader recently.
	RaftServerAlive = "alive"
	// RaftServerUnreachable: the server has not answered the leader for
	// longer than the last-contact threshold, but not yet for the
	// dead-server threshold (a server stopped a moment ago).
	RaftServerUnreachable = "unreachable"
	// RaftServerFailed: the leader has not reached the server for longer
	// than the dead-server threshold; with dead-server cleanup on, it is
	// removed from the configuration while quorum allows.
	RaftServerFailed = "failed"
)

// RaftServerHealth is one member of the Raft configuration as the leader
// sees it.
type RaftServerHealth struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Address string `json:"address"`
	Leader  bool   `json:"leader"`
	Voter   bool   `json:"voter"`
	// Version is the server's claimd build as it last answered the leader
	// (empty: not yet, or a server older than the field).
	Version string `json:"version,omitempty"`
	// Features are the log-entry features the server said it applies
	// (FeatureNames), as it last answered the leader.
	Features []string `json:"features,omitempty"`
	// Status is RaftServerAlive, RaftServerUnreachable or RaftServerFailed.
	Status string `json:"status"`
	// Healthy: alive, in contact with the leader within the threshold, on
	// the leader's term, and at most MaxTrailingLogs entries behind.
	Healthy bool `json:"healthy"`
	// StableSince is when Healthy last changed (as this leader saw it).
	StableSince time.Time `json:"stable_since"`
	// LastContact is how long ago the server last heard from the leader.
	// For a server that does not answer, it is counted from the newest
	// contact the leader knows of (or from when this leader began to
	// watch), so it grows while the server is away. Negative: never.
	LastContact HumanDuration `json:"last_contact"`
	LastTerm    uint64        `json:"last_term"`
	LastIndex   uint64        `json:"last_index"`
	// IndexLag is how many entries the server's log is behind the leader's.
	IndexLag uint64 `json:"index_lag"`
}

// RaftHealthResponse is the leader's health view of the whole
// configuration (Operator.RaftHealth).
type RaftHealthResponse struct {
	// Healthy: every server is healthy.
	Healthy bool `json:"healthy"`
	// FailureTolerance is how many more voters may fail with a quorum of
	// healthy voters left.
	FailureTolerance int                `json:"failure_tolerance"`
	LeaderID         string             `json:"leader_id"`
	Servers          []RaftServerHealth `json:"servers"`
	// EntryFeatures are the features every server in the configuration
	// has reported: the leader writes the entries that need them (for
	// holder-detached, decision 61: the holding node's own node detach is
	// recorded in the release entry). A feature missing here while every
	// server runs a build that has it: a server has not answered yet.
	EntryFeatures []string `json:"entry_features,omitempty"`

	// The thresholds the verdicts were made with.
	LastContactThreshold HumanDuration `json:"last_contact_threshold"`
	MaxTrailingLogs      uint64        `json:"max_trailing_logs"`
	DeadServerThreshold  HumanDuration `json:"dead_server_threshold"`
	CleanupDeadServers   bool          `json:"cleanup_dead_servers"`
	MinQuorum            uint          `json:"min_quorum"`
}

// HumanDuration is a time.Duration that JSON shows as "1.5s" (and
// negative as "never") for operators; on the wire (msgpack) it is the
// plain integer.
type HumanDuration time.Duration

func (d HumanDuration) String() string {
	if d < 0 {
		return "never"
	}
	return time.Duration(d).String()
}

// MarshalJSON implements json.Marshaler.
func (d HumanDuration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *HumanDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	if s == "never" {
		*d = -1
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = HumanDuration(v)
	return nil
}
