package chaos

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/claimd/claimd/structs"
)

// The model is the access-mode table of docs/architecture.md as a
// sequential specification of one volume (porcupine partitions the history
// by volume). Its state is the set of live claims, alloc → mode, encoded as
// a canonical string ("a1:r,a2:w") so states compare with == and hash
// cheaply.
//
//   - claim ok: the alloc already holds a live claim of the same mode (a
//     repeated claim returns it), or a new claim of that mode is admissible
//     under the live claims. Past claims are invisible to the workload, so
//     the model cannot require a claim to succeed.
//   - claim refused: nothing changes. max_claims is allowed whenever the
//     mode is limited at all (past claims count against the limit until
//     freed), and for an alloc claiming again while its own earlier claim
//     is being released; never otherwise (readers of multi-node volumes,
//     anything on multi-node-multi-writer).
//   - claim unknown: nondeterministic, applied (if admissible) or not.
//   - release, stop, drop: the alloc's claim is no longer live.
//   - read ok: returns exactly the live set.

func encodeLive(m map[string]bool) string {
	keys := make([]string, 0, len(m))
	for a, w := range m {
		mode := "r"
		if w {
			mode = "w"
		}
		keys = append(keys, a+":"+mode)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func decodeLive(s string) map[string]bool {
	m := map[string]bool{}
	if s == "" {
		return m
	}
	for _, kv := range strings.Split(s, ",") {
		a, mode, _ := strings.Cut(kv, ":")
		m[a] = mode == "w"
	}
	return m
}

// admissible reports whether a new claim of the op's mode may be taken on
// a volume with these live claims.
func admissible(access structs.AccessMode, live map[string]bool, write bool) bool {
	switch access {
	case structs.AccessModeSingleNodeReader:
		return !write && len(live) == 0
	case structs.AccessModeSingleNodeWriter, structs.AccessModeSingleNodeSingleWriter:
		return len(live) == 0
	case structs.AccessModeMultiNodeReader:
		return !write
	case structs.AccessModeMultiNodeSingleWriter:
		if !write {
			return true
		}
		for _, w := range live {
			if w {
				return false
			}
		}
		return true
	case structs.AccessModeMultiNodeMultiWriter:
		return true
	}
	return false
}

// maxClaimsAllowed reports whether a max_claims refusal can ever be right
// for a claim of this mode on this access mode.
func maxClaimsAllowed(access structs.AccessMode, write bool) bool {
	switch access {
	case structs.AccessModeSingleNodeWriter, structs.AccessModeSingleNodeSingleWriter:
		return true
	case structs.AccessModeSingleNodeReader:
		return !write
	case structs.AccessModeMultiNodeSingleWriter:
		return write
	}
	return false
}

func stepClaim(state string, op *Op) []any {
	live := decodeLive(state)
	if w, held := live[op.Alloc]; held {
		switch op.Outcome {
		case OK:
			if w == op.Write {
				return []any{state}
			}
			return nil
		default:
			return []any{state}
		}
	}
	switch op.Outcome {
	case OK:
		if !admissible(op.Access, live, op.Write) {
			return nil
		}
		live[op.Alloc] = op.Write
		return []any{encodeLive(live)}
	case Refused:
		if op.Code == string(structs.CodeMaxClaims) && !op.Again && !maxClaimsAllowed(op.Access, op.Write) {
			return nil
		}
		return []any{state}
	default:
		out := []any{state}
		if admissible(op.Access, live, op.Write) {
			live[op.Alloc] = op.Write
			out = append(out, encodeLive(live))
		}
		return out
	}
}

func step(state any, input, _ any) []any {
	s := state.(string)
	op := input.(*Op)
	switch op.Kind {
	case OpClaim:
		return stepClaim(s, op)
	case OpRelease, OpStop, OpDrop:
		live := decodeLive(s)
		delete(live, op.Alloc)
		return []any{encodeLive(live)}
	case OpRead:
		got := map[string]bool{}
		for _, c := range op.Live {
			got[c.Alloc] = c.Write
		}
		if encodeLive(got) == s {
			return []any{s}
		}
		return nil
	}
	return nil
}

// claimModel is the porcupine model, partitioned by volume.
var claimModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byVol := map[string][]porcupine.Operation{}
		var names []string
		for _, o := range history {
			v := o.Input.(*Op).Volume
			if _, ok := byVol[v]; !ok {
				names = append(names, v)
			}
			byVol[v] = append(byVol[v], o)
		}
		sort.Strings(names)
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, byVol[n])
		}
		return out
	},
	Init:  func() []any { return []any{""} },
	Step:  step,
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	Hash: func(s any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s.(string)))
		return h.Sum64()
	},
	DescribeOperation: func(input, _ any) string { return describeOp(input.(*Op)) },
	DescribeState:     func(s any) string { return "{" + s.(string) + "}" },
}).ToModel()

func describeOp(op *Op) string {
	mode := "r"
	if op.Write {
		mode = "w"
	}
	res := string(op.Outcome)
	if op.Code != "" {
		res += "(" + op.Code + ")"
	}
	switch op.Kind {
	case OpClaim:
		s := fmt.Sprintf("claim %s %s:%s → %s", op.Volume, op.Alloc, mode, res)
		if op.Again {
			s = "re-" + s
		}
		if op.Outcome == OK && !op.New {
			s += " (not new)"
		}
		return s
	case OpRead:
		parts := make([]string, 0, len(op.Live))
		for _, c := range op.Live {
			m := "r"
			if c.Write {
				m = "w"
			}
			parts = append(parts, c.Alloc+":"+m)
		}
		sort.Strings(parts)
		return fmt.Sprintf("read %s → {%s}", op.Volume, strings.Join(parts, ","))
	default:
		s := fmt.Sprintf("%s %s %s → %s", op.Kind, op.Volume, op.Alloc, res)
		if op.Synthetic {
			s += " (synthetic)"
		}
		return s
	}
}

// prune drops operations that cannot change the verdict, because an
// operation whose return is infinite may be placed anywhere after its call
// and every such operation multiplies the checker's search:
//
//   - An unknown claim whose allocation no read ever showed: the model
//     lets it not take effect, and taking effect never makes anything else
//     legal (it only narrows who else may claim, and a read would have to
//     show it), so the history is linearizable with it exactly when it is
//     without it.
//   - Releases, stops and drops of an allocation that then has no claim
//     left that was acknowledged or seen: they remove nothing.
//   - A release-type operation with an infinite return, of an allocation
//     whose claims all return before another release-type operation of it
//     was invoked: after that one, nothing can give the allocation a claim
//     again, so the later ones remove nothing that one could not.
func prune(ops []Op) []Op {
	seen := map[string]bool{}
	for _, o := range ops {
		if o.Kind == OpRead && o.Outcome == OK {
			for _, c := range o.Live {
				seen[c.Alloc] = true
			}
		}
	}
	keep := make([]bool, len(ops))
	acked := map[string]bool{}
	lastClaimReturn := map[string]int64{}
	for i, o := range ops {
		keep[i] = true
		if o.Kind != OpClaim {
			continue
		}
		if o.Outcome == Unknown && !seen[o.Alloc] {
			keep[i] = false
			continue
		}
		if o.Outcome == OK || o.Outcome == Unknown {
			acked[o.Alloc] = true
			lastClaimReturn[o.Alloc] = max(lastClaimReturn[o.Alloc], o.Return)
		}
	}
	releasing := func(o Op) bool { return o.Kind == OpRelease || o.Kind == OpStop || o.Kind == OpDrop }
	// The earliest call of a release-type op of each alloc that no claim
	// of it can follow.
	fence := map[string]int64{}
	for _, o := range ops {
		if releasing(o) && o.Outcome != Refused && o.Call >= lastClaimReturn[o.Alloc] {
			if f, ok := fence[o.Alloc]; !ok || o.Call < f {
				fence[o.Alloc] = o.Call
			}
		}
	}
	for i, o := range ops {
		if !releasing(o) {
			continue
		}
		switch f, ok := fence[o.Alloc]; {
		case !acked[o.Alloc]:
			keep[i] = false
		case ok && o.Return == Inf && o.Call > f:
			keep[i] = false
		case ok && o.Return == Inf && o.Call == f:
			// Keep the first of equals only.
			for j := 0; j < i; j++ {
				if keep[j] && releasing(ops[j]) && ops[j].Alloc == o.Alloc && ops[j].Call == f && ops[j].Return == Inf {
					keep[i] = false
				}
			}
		}
	}
	out := make([]Op, 0, len(ops))
	for i, o := range ops {
		if keep[i] {
			out = append(out, o)
		}
	}
	return out
}

// porcupineOps turns the recorded history into porcupine operations:
// reads that failed and refused releases/stops have no effect and are
// left out; an infinite return becomes one past the last finite time.
// Operations that extend past their caller's next one get their own
// client row, so the visualisation draws them apart.
func porcupineOps(ops []Op, callers int) []porcupine.Operation {
	ops = prune(ops)
	var end int64
	for _, o := range ops {
		if o.Return != Inf && o.Return > end {
			end = o.Return
		}
		if o.Call > end {
			end = o.Call
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	extra := callers
	for i := range ops {
		o := &ops[i]
		switch {
		case o.Kind == OpRead && o.Outcome != OK:
			continue
		case (o.Kind == OpRelease || o.Kind == OpStop) && o.Outcome == Refused:
			continue
		}
		ret := o.Return
		if ret == Inf {
			ret = end + 1
		}
		client := o.Caller
		if client < 0 || o.Outcome == Unknown {
			client = extra
			extra++
		}
		out = append(out, porcupine.Operation{ClientId: client, Input: o, Output: o, Call: o.Call, Return: ret})
	}
	return out
}
