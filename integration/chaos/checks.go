package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// explainIllegal checks each volume on its own and, for each one that is
// not linearizable, shows where its longest linearizable prefix ends: the
// last operations it could place and the earliest ones it could not.
func explainIllegal(pops []porcupine.Operation, timeout time.Duration) string {
	var out []string
	for _, part := range claimModel.Partition(pops) {
		res, info := porcupine.CheckOperationsVerbose(claimModel, part, timeout)
		if res != porcupine.Illegal {
			continue
		}
		vol := part[0].Input.(*Op).Volume
		var longest []porcupine.Operation
		for _, p := range info.PartialLinearizationsOperations() {
			for _, lin := range p {
				if len(lin) > len(longest) {
					longest = lin
				}
			}
		}
		in := map[int]bool{}
		for _, o := range longest {
			in[o.Input.(*Op).ID] = true
		}
		s := fmt.Sprintf("volume %s (%d ops): longest linearizable prefix has %d ops, ending:", vol, len(part), len(longest))
		for _, o := range longest[max(0, len(longest)-8):] {
			s += "\n    " + opLine(o.Input.(*Op))
		}
		var missing []*Op
		for _, o := range part {
			if op := o.Input.(*Op); !in[op.ID] {
				missing = append(missing, op)
			}
		}
		sort.Slice(missing, func(i, j int) bool { return missing[i].Call < missing[j].Call })
		s += "\n  earliest operations it could not place:"
		for _, op := range missing[:min(6, len(missing))] {
			s += "\n    " + opLine(op)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "  (no single volume fails on its own within the timeout)"
	}
	return "  " + strings.Join(out, "\n  ")
}

func opLine(op *Op) string {
	ret := "inf"
	if op.Return != Inf {
		ret = time.Duration(op.Return).Round(time.Microsecond).String()
	}
	return fmt.Sprintf("#%d [%s, %s] caller %d %s (fault: %s) %s", op.ID, time.Duration(op.Call).Round(time.Microsecond), ret,
		op.Caller, describeOp(op), op.Nemesis, firstLine(op.Err))
}

// writeVisualisation saves porcupine's HTML view, with the faults as
// annotations.
func writeVisualisation(path string, info porcupine.LinearizationInfo, spans []Span) error {
	var anns []porcupine.Annotation
	for _, s := range spans {
		end := s.End
		if end == 0 {
			end = s.Start
		}
		anns = append(anns, porcupine.Annotation{Tag: "fault", Start: s.Start, End: end,
			Description: s.Name, Details: s.Desc, BackgroundColor: "#fde2e2"})
	}
	info.AddAnnotations(anns)
	return porcupine.VisualizePath(claimModel, info, path)
}

// checkAcknowledged is S8 on the final state: after every fault healed,
// an alloc whose last acknowledged operation was a claim, with nothing
// after it that could release (no release, stop or drop invoked), still
// holds that claim; one whose last acknowledged operation released, with
// no claim invoked after it, holds none.
func checkAcknowledged(ops []Op) []string {
	final := map[string]map[string]bool{} // volume → alloc → held
	for _, o := range ops {
		if o.Kind == OpRead && o.Final && o.Outcome == OK {
			m := map[string]bool{}
			for _, c := range o.Live {
				m[c.Alloc] = true
			}
			final[o.Volume] = m
		}
	}
	byAlloc := map[string][]Op{}
	for _, o := range ops {
		if o.Alloc != "" && o.Kind != OpRead {
			byAlloc[o.Alloc] = append(byAlloc[o.Alloc], o)
		}
	}
	var problems []string
	allocs := make([]string, 0, len(byAlloc))
	for a := range byAlloc {
		allocs = append(allocs, a)
	}
	sort.Strings(allocs)
	for _, a := range allocs {
		list := byAlloc[a]
		sort.SliceStable(list, func(i, j int) bool { return list[i].Call < list[j].Call })
		held, ok := final[list[0].Volume]
		if !ok {
			problems = append(problems, fmt.Sprintf("S8: no final read of volume %s", list[0].Volume))
			continue
		}
		last := -1
		for i, o := range list {
			if o.Outcome == OK && !o.Synthetic {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		after := list[last+1:]
		switch list[last].Kind {
		case OpClaim:
			releasing := false
			for _, o := range after {
				if o.Kind == OpRelease || o.Kind == OpStop || o.Kind == OpDrop {
					releasing = true
				}
			}
			if !releasing && !held[a] {
				problems = append(problems, fmt.Sprintf("S8: claim of %s by %s acknowledged at %s and never released is not live after the faults healed",
					list[last].Volume, a, time.Duration(list[last].Return)))
			}
		case OpRelease, OpStop:
			claiming := false
			for _, o := range after {
				if o.Kind == OpClaim {
					claiming = true
				}
			}
			if !claiming && held[a] {
				problems = append(problems, fmt.Sprintf("S8: %s of %s's claim on %s acknowledged at %s is undone: the claim is live after the faults healed",
					list[last].Kind, a, list[last].Volume, time.Duration(list[last].Return)))
			}
		}
	}
	return problems
}

// auditInput is what the audit checker needs to know about the run.
type auditInput struct {
	// access by the volume's external ID (the plugin's volume ID).
	access map[string]structs.AccessMode
	// linExt are the external IDs of the linearizability volumes, which
	// no agent may mount (parking).
	linExt map[string]bool
	// released: every claim was freed before the logs were read, so
	// nothing may be left attached, staged or published.
	released bool
	// tampers are the tamper nemesis's changes to the storage, replayed
	// with the audit: a refusal caused by an orphan it made is the
	// plugin's own protection, not claimd asking for a second node.
	tampers []tamperEvent
}

type auditEvent struct {
	hostdir.AuditEntry
	source string
}

func singleNode(m structs.AccessMode) bool {
	return m == structs.AccessModeSingleNodeReader || m == structs.AccessModeSingleNodeWriter ||
		m == structs.AccessModeSingleNodeSingleWriter || m == structs.AccessModeSingleNodeMultiWriter
}

// checkAudit replays every plugin's audit log in time order (entries carry
// the time each call finished; all plugins share one clock) and checks:
//
//   - S1 at the plugin (the invariants are in docs/architecture.md): a
//     single-node volume is controller-published to at most one node at a
//     time, and the controller is never asked to attach
//     a single-writer volume to a second node (hostdir refuses it and says
//     so: "cannot also attach", "already has a writer");
//   - S3/S4: ControllerUnpublish of a volume from a node only when that
//     node's plugin has nothing of it published or staged;
//   - a node mounts only what is attached: NodeStage and NodePublish only
//     while the volume is controller-published to that node (a stage before
//     the ControllerPublish, or after the ControllerUnpublish, is a mount
//     the controller does not know about);
//   - S5 by its effect: once every claim is freed, nothing is left attached,
//     staged or published (a ControllerPublish sent for a release, or after
//     the claim's detach, leaves an attachment nobody will remove);
//   - parking holds: no agent mounted a volume of the linearizability
//     workload (else that workload had a caller the history cannot see).
//
// A second ControllerPublish of one volume to one node without an
// unpublish between is not an error by itself: a re-claim publishes again
// when the first publish was not recorded (the server that ran it lost
// leadership), and ControllerPublish is idempotent.
func checkAudit(in auditInput, logs map[string][]hostdir.AuditEntry) []string {
	var all []auditEvent
	for src, entries := range logs {
		for _, e := range entries {
			all = append(all, auditEvent{AuditEntry: e, source: src})
		}
	}
	for _, te := range in.tampers {
		method := "TamperDetach"
		if te.Attach {
			method = "TamperAttach"
		}
		all = append(all, auditEvent{AuditEntry: hostdir.AuditEntry{Time: te.Time, Method: method, Volume: te.Volume, Node: te.Node, Result: "ok"},
			source: "tamper"})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })

	type pair = [2]string
	attached := map[string]map[string]bool{}
	published := map[pair]map[string]bool{}
	staged := map[pair]bool{}
	// orphans: attachments the tamper nemesis made that claimd has not
	// made its own (published to that node) or removed.
	orphans := map[pair]bool{}
	var problems []string
	report := func(e auditEvent, format string, args ...any) {
		if len(problems) < 50 {
			problems = append(problems, fmt.Sprintf("%s [%s %s %s vol=%s node=%s at %s: %s]", fmt.Sprintf(format, args...),
				e.source, e.Method, e.Target, e.Volume, e.Node, e.Time.Format("15:04:05.000000"), firstLine(e.Result)))
		}
	}
	for _, e := range all {
		k := pair{e.Volume, e.Node}
		ok := e.Result == "ok"
		access := in.access[e.Volume]
		switch e.Method {
		case "TamperAttach":
			// Always an orphan, even where claimd attached the volume
			// to that node before: the nemesis adds only where the
			// storage has no attachment, so claimd's was removed behind
			// its back first, and the storage now holds the nemesis's
			// attachment in the nemesis's mode (single-node writer),
			// which the plugin may refuse another node for.
			orphans[k] = true
		case "TamperDetach":
			delete(orphans, k)
		case "ControllerPublishVolume":
			if strings.Contains(e.Result, "cannot also attach") || strings.Contains(e.Result, "already has a writer") {
				if m := refusedFor.FindStringSubmatch(e.Result); m == nil || !orphans[pair{e.Volume, m[1]}] {
					report(e, "S1: claimd asked the controller to attach volume %s (%s) to a node its own attachments exclude", e.Volume, access)
				}
			}
			if !ok {
				continue
			}
			delete(orphans, k)
			if attached[e.Volume] == nil {
				attached[e.Volume] = map[string]bool{}
			}
			attached[e.Volume][e.Node] = true
			if singleNode(access) && len(attached[e.Volume]) > 1 {
				report(e, "S1: single-node volume %s attached to %d nodes at once: %v", e.Volume, len(attached[e.Volume]), keys(attached[e.Volume]))
			}
		case "ControllerUnpublishVolume":
			if !ok {
				continue
			}
			if n := len(published[k]); n > 0 || staged[k] {
				report(e, "S3: ControllerUnpublish of %s from %s while that node still has it published at %d targets (staged: %v)",
					e.Volume, e.Node, n, staged[k])
			}
			delete(attached[e.Volume], e.Node)
			delete(orphans, k)
		case "NodeStageVolume", "NodePublishVolume":
			if in.linExt[e.Volume] {
				report(e, "parking: an agent mounted %s, a volume only the workload may claim", e.Volume)
			}
			if !ok {
				continue
			}
			if !attached[e.Volume][e.Node] {
				report(e, "%s of %s on %s while it is not controller-published to that node", e.Method, e.Volume, e.Node)
			}
			if e.Method == "NodeStageVolume" {
				staged[k] = true
			} else {
				if published[k] == nil {
					published[k] = map[string]bool{}
				}
				published[k][e.Target] = true
			}
		case "NodeUnstageVolume":
			if ok {
				staged[k] = false
			}
		case "NodeUnpublishVolume":
			if ok {
				delete(published[k], e.Target)
			}
		}
	}
	if in.released {
		var left []string
		for v, nodes := range attached {
			for n := range nodes {
				left = append(left, fmt.Sprintf("%s attached to %s", v, n))
			}
		}
		for k, targets := range published {
			for t := range targets {
				left = append(left, fmt.Sprintf("%s published on %s at %s", k[0], k[1], t))
			}
		}
		for k, st := range staged {
			if st {
				left = append(left, fmt.Sprintf("%s staged on %s", k[0], k[1]))
			}
		}
		sort.Strings(left)
		if len(left) > 0 {
			problems = append(problems, fmt.Sprintf("S5/L1: every claim is freed, yet the plugins still have %d attachments or mounts: %s",
				len(left), strings.Join(left[:min(len(left), 10)], "; ")))
		}
	}
	return problems
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readAudits reads every plugin's audit log.
func readAudits(c Cluster) (map[string][]hostdir.AuditEntry, error) {
	out := map[string][]hostdir.AuditEntry{}
	for _, w := range c.Workers() {
		e, err := hostdir.ReadAudit(w.NodeAudit)
		if err != nil {
			return nil, fmt.Errorf("audit log of %s: %w", w.Name, err)
		}
		out[w.Name] = e
	}
	e, err := hostdir.ReadAudit(c.ControllerAudit())
	if err != nil {
		return nil, fmt.Errorf("controller audit log: %w", err)
	}
	out["controller"] = e
	return out, nil
}

// waitReleased is L1 after the faults: every claim (live ones were
// stopped by the caller of this) is freed and no eval is pending within
// the time given.
func waitReleased(cl *api.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			vols, _, err := cl.Volumes(ctx, "", structs.QueryOptions{})
			if err != nil {
				return err
			}
			var held []string
			for _, v := range vols {
				for _, c := range v.AllClaims() {
					held = append(held, fmt.Sprintf("%s/%s(%s)", v.ID, c.AllocID, c.State))
				}
			}
			if len(held) > 0 {
				if len(held) > 10 {
					held = append(held[:10], fmt.Sprintf("and %d more", len(held)-10))
				}
				return fmt.Errorf("claims not freed: %s", strings.Join(held, " "))
			}
			evals, _, err := cl.Evals(ctx, structs.EvalStatusPending, "", structs.QueryOptions{})
			if err != nil {
				return err
			}
			if len(evals) > 0 {
				var ids []string
				for _, e := range evals {
					ids = append(ids, e.ID+"("+e.VolumeID+")")
				}
				return fmt.Errorf("%d evals pending: %s", len(evals), strings.Join(ids, " "))
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("L1: not every past claim freed and eval complete within %s of the faults healing: %w", timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkDigests is S2 once the workload has stopped and every claim is
// freed: every server caught up (one round in which all report the same
// state index) and holds the same state there. Each digest names the index
// of the state it hashed (fsm.StateStore.Digest), not Raft's applied
// index, which runs ahead of the state machine (digests.go).
func checkDigests(c Cluster, timeout time.Duration) error {
	r := compareDigests(c, timeout, true)
	switch {
	case r.Violation != "":
		return fmt.Errorf("S2: %s", r.Violation)
	case r.Inconclusive != "":
		return fmt.Errorf("S2: could not compare state digests: %s", r.Inconclusive)
	}
	return nil
}

// saveFailure writes what a failing run leaves for its reader.
// The visualisation checks vis again (each part of it finished once,
// within timeout).
func saveFailure(dir string, c Cluster, h *History, vis []porcupine.Operation, timeout time.Duration, extra map[string]any) []string {
	var errs []string
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return []string{err.Error()}
	}
	if err := h.Save(dir+"/history.json", extra); err != nil {
		errs = append(errs, "history: "+err.Error())
	}
	if len(vis) > 0 {
		_, info := porcupine.CheckOperationsVerbose(claimModel, vis, timeout)
		if err := writeVisualisation(dir+"/linearizability.html", info, h.Spans()); err != nil {
			errs = append(errs, "visualisation: "+err.Error())
		}
	}
	if err := c.SaveLogs(dir + "/logs"); err != nil {
		errs = append(errs, "logs: "+err.Error())
	}
	return errs
}
