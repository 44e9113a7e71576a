package structs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// EvalType names the work an evaluation asks for.
type EvalType string

// EvalTypeVolumeClaimGC drives a volume's past claims to freed: node
// detach, then controller detach, then free (seed 2).
const EvalTypeVolumeClaimGC EvalType = "volume-claim-gc"

// EvalStatus is where an evaluation is.
type EvalStatus string

const (
	EvalStatusPending  EvalStatus = "pending"
	EvalStatusComplete EvalStatus = "complete"
	EvalStatusFailed   EvalStatus = "failed"
)

func (s EvalStatus) Valid() bool {
	return s == EvalStatusPending || s == EvalStatusComplete || s == EvalStatusFailed
}

// Terminal reports whether the evaluation is finished for good.
func (s EvalStatus) Terminal() bool { return s == EvalStatusComplete || s == EvalStatusFailed }

// Eval is a unit of server-side work. Retry timing (attempts, backoff,
// last error) lives in the leader's memory, not here: only outcomes are
// replicated.
type Eval struct {
	ID                string     `json:"id"`
	Type              EvalType   `json:"type"`
	VolumeID          string     `json:"volume_id"`
	Status            EvalStatus `json:"status"`
	StatusDescription string     `json:"status_description,omitempty"`
	// TriggeredBy says why the eval exists (alloc-terminal, claim-release,
	// node-down, operator...), for humans.
	TriggeredBy string `json:"triggered_by,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// What triggered a volume-claim-gc eval.
const (
	EvalTriggerAllocTerminal = "alloc-terminal"
	EvalTriggerClaimRelease  = "claim-release"
	EvalTriggerNodeDown      = "node-down"
	EvalTriggerOperator      = "operator"
)

// Validate checks an eval as the leader upserts it.
func (e *Eval) Validate() error {
	if e == nil {
		return Invalid("eval", "must be given")
	}
	if err := ValidateID("id", e.ID); err != nil {
		return err
	}
	if e.Type != EvalTypeVolumeClaimGC {
		return Invalid("type", fmt.Sprintf("%q is not %q", e.Type, EvalTypeVolumeClaimGC))
	}
	if err := ValidateID("volume_id", e.VolumeID); err != nil {
		return err
	}
	if e.Status != "" && !e.Status.Valid() {
		return Invalid("status", fmt.Sprintf("%q is not one of pending, complete, failed", e.Status))
	}
	if len(e.StatusDescription)+len(e.TriggeredBy) > maxVolumeValueLen {
		return Invalid("status_description", fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
	}
	return nil
}

// Copy returns a copy (Eval holds no references).
func (e *Eval) Copy() *Eval {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// DeriveEvalID names an eval the state machine creates itself. Every server
// must pick the same ID for the same log entry, so it cannot be random: it
// is a hash of the Raft index and the volume ID, shaped like a UUID. One
// entry creates at most one eval per volume, so the pair is unique.
func DeriveEvalID(index uint64, volumeID string) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], index)
	h.Write(b[:])
	h.Write([]byte(volumeID))
	s := hex.EncodeToString(h.Sum(nil)[:16])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// EvalUpsertRequest creates or updates evals. An eval for a volume that
// has no past claims left is stored already complete: there is nothing for
// it to do; one for a volume that does not exist is not stored (an eval
// lives in its volume's row).
type EvalUpsertRequest struct {
	Evals []*Eval
	WriteRequest
}

// EvalCompleteRequest finishes an eval. Complete is refused while the
// eval's volume still has past claims (the work is not done); failed is the
// permanent-error exit and is always accepted, with the reason in
// StatusDescription.
type EvalCompleteRequest struct {
	EvalID string
	// VolumeID is the eval's volume, when the sender knows it (the
	// release watcher always does): the state machine then reads the eval
	// from that volume's row instead of searching every volume, which an
	// entry written before the field existed still gets.
	VolumeID          string
	Status            EvalStatus
	StatusDescription string
	WriteRequest
}

// EvalSpecificRequest reads one eval.
type EvalSpecificRequest struct {
	ID string
	QueryOptions
}

// EvalListRequest lists evals, optionally by status and/or volume.
type EvalListRequest struct {
	Status   EvalStatus
	VolumeID string
	QueryOptions
}

// EvalResponse carries one eval (nil when not found).
type EvalResponse struct {
	Eval *Eval
	QueryMeta
}

// EvalListResponse carries evals sorted by ID.
type EvalListResponse struct {
	Evals []*Eval
	QueryMeta
}
