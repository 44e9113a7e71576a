package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/claimd/claimd/structs"
)

// OpKind is what a recorded operation did.
type OpKind string

const (
	// OpClaim places an allocation (if it is the identity's first claim)
	// and claims one volume for it with Volume.Claim.
	OpClaim OpKind = "claim"
	// OpRelease releases the allocation's claim with the same RPC
	// (Volume.Claim with Release set).
	OpRelease OpKind = "release"
	// OpStop stops the allocation (Alloc.Stop) and returns once the client
	// agent has reported it terminal, which releases its claims.
	OpStop OpKind = "stop"
	// OpRead reads the volume (Volume.Get, not stale).
	OpRead OpKind = "read"
	// OpDrop is synthetic: the allocation ended lost (its node was marked
	// down) or failed (its agent gave up) without the workload asking, which
	// released its claim at some time after it was placed.
	OpDrop OpKind = "drop"
)

// Outcome classifies a result for the model.
type Outcome string

const (
	// OK: acknowledged.
	OK Outcome = "ok"
	// Refused: a definite refusal; the request was certainly not applied.
	Refused Outcome = "refused"
	// Unknown: timeout, transport failure, unavailable, leadership lost:
	// the request may have been applied, now or later.
	Unknown Outcome = "unknown"
)

// Inf is the return time of an operation whose effect may land at any
// later time (porcupine: after every other operation).
const Inf = int64(math.MaxInt64)

// LiveClaim is one live claim as a read returned it.
type LiveClaim struct {
	Alloc string `json:"alloc"`
	Write bool   `json:"write"`
}

// Op is one recorded operation. Times are nanoseconds since the history
// began, on the monotonic clock.
type Op struct {
	ID     int                `json:"id"`
	Caller int                `json:"caller"` // -1: synthetic
	Kind   OpKind             `json:"kind"`
	Volume string             `json:"volume"`
	Access structs.AccessMode `json:"access"`
	Alloc  string             `json:"alloc,omitempty"`
	Worker string             `json:"worker,omitempty"`
	Write  bool               `json:"write,omitempty"`
	// Again marks a claim that is not the allocation's first: the server
	// may answer max_claims while the alloc's own earlier claim is being
	// released, whatever the access mode.
	Again bool `json:"again,omitempty"`
	// Synthetic operations are added by the recorder, not sent: the
	// release half of a claim whose outcome is unknown (the server may
	// have taken the claim and released it again when its controller
	// publish failed), and drops.
	Synthetic bool    `json:"synthetic,omitempty"`
	Call      int64   `json:"call"`
	Return    int64   `json:"return"`
	Outcome   Outcome `json:"outcome"`
	Code      string  `json:"code,omitempty"`
	Err       string  `json:"err,omitempty"`
	New       bool    `json:"new,omitempty"`
	// Live is what a read returned.
	Live []LiveClaim `json:"live,omitempty"`
	// Nemesis is the fault in force when the operation was invoked.
	Nemesis string `json:"nemesis"`
	// Final marks the reads taken after every fault healed.
	Final bool `json:"final,omitempty"`
}

// Span is one fault's time in force.
type Span struct {
	Name  string `json:"name"`
	Desc  string `json:"desc"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
}

// History records operations from many goroutines.
type History struct {
	start time.Time

	mu      sync.Mutex
	ops     []*Op
	nemesis string
	spans   []Span
}

// NewHistory starts the clock.
func NewHistory() *History { return &History{start: time.Now(), nemesis: "none"} }

// Now is the history clock.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Begin records an invocation and returns the op to complete with End.
func (h *History) Begin(op *Op) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	op.Call = h.Now()
	op.Return = Inf
	op.Outcome = Unknown
	op.Nemesis = h.nemesis
	h.ops = append(h.ops, op)
	return op
}

// End completes an op with its outcome at the current time; an Unknown
// outcome keeps an infinite return (see Extend). set, if given, fills in
// result fields under the history's lock.
func (h *History) End(op *Op, out Outcome, err error, set ...func(*Op)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range set {
		f(op)
	}
	op.Outcome = out
	if out != Unknown {
		op.Return = h.Now()
	}
	if err != nil {
		op.Err = err.Error()
		op.Code = errCode(err)
	}
}

// Extend bounds an unknown op's effect: it cannot land after t (for
// example, a claim cannot be applied once its allocation's stop has
// committed).
func (h *History) Extend(op *Op, t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if op.Outcome == Unknown && t < op.Return {
		op.Return = t
	}
}

// Add records a synthetic op with the given times.
func (h *History) Add(op *Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	op.Synthetic = true
	op.Caller = -1
	if op.Nemesis == "" {
		op.Nemesis = h.nemesisAtLocked(op.Call)
	}
	h.ops = append(h.ops, op)
}

// SetNemesis marks the fault now in force ("none" between faults) and
// records the span of the previous one.
func (h *History) SetNemesis(name, desc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.Now()
	if n := len(h.spans); n > 0 && h.spans[n-1].End == 0 {
		h.spans[n-1].End = now
	}
	h.nemesis = name
	if name != "none" {
		h.spans = append(h.spans, Span{Name: name, Desc: desc, Start: now})
	}
}

// SetDesc describes the fault in force.
func (h *History) SetDesc(desc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.spans); n > 0 && h.spans[n-1].End == 0 {
		h.spans[n-1].Desc = desc
	}
}

func (h *History) nemesisAtLocked(t int64) string {
	for _, s := range h.spans {
		if t >= s.Start && (s.End == 0 || t < s.End) {
			return s.Name
		}
	}
	return "none"
}

// Ops returns a snapshot of the ops (copies).
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.ops))
	for i, o := range h.ops {
		out[i] = *o
	}
	return out
}

// Spans returns the fault spans.
func (h *History) Spans() []Span {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Span(nil), h.spans...)
}

// Save writes the history as JSON.
func (h *History) Save(path string, extra map[string]any) error {
	doc := map[string]any{"ops": h.Ops(), "faults": h.Spans()}
	for k, v := range extra {
		doc[k] = v
	}
	buf, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, buf, 0o644)
}

// Tally is a count of outcomes.
type Tally struct{ OK, Refused, Unknown int }

func (t Tally) Total() int { return t.OK + t.Refused + t.Unknown }

// TallyByNemesis counts the workload's own (not synthetic) ops by the fault
// in force when they were invoked.
func TallyByNemesis(ops []Op) map[string]Tally {
	out := map[string]Tally{}
	for _, o := range ops {
		if o.Synthetic {
			continue
		}
		t := out[o.Nemesis]
		switch o.Outcome {
		case OK:
			t.OK++
		case Refused:
			t.Refused++
		default:
			t.Unknown++
		}
		out[o.Nemesis] = t
	}
	return out
}

// OverlapByNemesis counts the workload's own ops whose interval overlaps
// each fault's time in force (an op blocked through a whole fault counts
// there, though it was invoked before).
func OverlapByNemesis(ops []Op, spans []Span) map[string]int {
	out := map[string]int{}
	for _, s := range spans {
		end := s.End
		if end == 0 {
			end = Inf
		}
		for _, o := range ops {
			if !o.Synthetic && o.Call < end && o.Return > s.Start {
				out[s.Name]++
			}
		}
	}
	return out
}

// FormatTally renders the tally as lines sorted by name.
func FormatTally(m map[string]Tally, overlap map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	s := fmt.Sprintf("%-22s %7s %7s %7s %7s %12s\n", "fault (invoked under)", "ops", "ok", "refused", "unknown", "overlapping")
	var all Tally
	for _, n := range names {
		t := m[n]
		all.OK += t.OK
		all.Refused += t.Refused
		all.Unknown += t.Unknown
		s += fmt.Sprintf("%-22s %7d %7d %7d %7d %12d\n", n, t.Total(), t.OK, t.Refused, t.Unknown, overlap[n])
	}
	s += fmt.Sprintf("%-22s %7d %7d %7d %7d\n", "all", all.Total(), all.OK, all.Refused, all.Unknown)
	return s
}

// errCode is the coded error's code, or "transport"/"error".
func errCode(err error) string {
	var ce *structs.CodedError
	if errors.As(err, &ce) {
		return string(ce.Code)
	}
	return "error"
}
