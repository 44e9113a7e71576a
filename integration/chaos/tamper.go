package chaos

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// The tamper nemesis (issue 27) changes the storage behind claimd's back
// while the workload runs, as a storage administrator's own tool would:
// it attaches mount-pool volumes to nodes no claim asked for (orphans) and
// removes attachments claims rely on (missing). claimd must neither trust
// the storage for a claim decision nor let a repair take a volume from a
// node that holds it: the checkers still find no second writer, no
// ControllerUnpublish under a mounted node, and a storage with nothing
// attached once every claim is freed. Orphans of fence-policy volumes are
// repaired by claimd's reconciler where it runs often enough (the
// in-process backend); what is left the nemesis removes when it heals,
// unless claimd meanwhile made the attachment its own.

// maxTampers bounds the changes one fault makes.
const maxTampers = 40

// tamperEvent is one change made to the storage behind claimd's back.
type tamperEvent struct {
	Time   time.Time `json:"time"`
	Attach bool      `json:"attach"` // an attachment added; else one removed
	Volume string    `json:"volume"` // external volume ID
	Node   string    `json:"node"`   // external node ID
}

// tamperer keeps what the nemesis did, for the checkers.
type tamperer struct {
	root  string
	vols  []volSpec
	nodes []string // the workers' external node IDs
	// nodeID maps an external node ID to claimd's node ID.
	nodeID map[string]string

	// repairWait is how long a heal first leaves the orphans to claimd's
	// reconciler (0: the cluster repairs too late for a run, the nemesis
	// removes them itself at once).
	repairWait time.Duration

	mu     sync.Mutex
	events []tamperEvent
	// added are orphans the nemesis made and has not removed itself.
	added map[[2]string]bool
}

// repairer is a Cluster whose reconciler repairs orphans of fence-policy
// volumes within a run: RepairWithin bounds how long that takes.
type repairer interface{ RepairWithin() time.Duration }

func newTamperer(c Cluster, w *workload) *tamperer {
	t := &tamperer{root: c.StorageRoot(), vols: w.mounts, nodeID: map[string]string{}, added: map[[2]string]bool{}}
	if r, ok := c.(repairer); ok {
		t.repairWait = r.RepairWithin()
	}
	for _, wk := range w.workers {
		ext := w.extNode[wk.Name]
		t.nodes = append(t.nodes, ext)
		t.nodeID[ext] = wk.NodeID
	}
	return t
}

func (t *tamperer) record(e tamperEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, e)
	k := [2]string{e.Volume, e.Node}
	if e.Attach {
		t.added[k] = true
	} else {
		delete(t.added, k)
	}
}

// Events copies what was done so far.
func (t *tamperer) Events() []tamperEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.events)
}

func (t *tamperer) orphans() [][2]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out [][2]string
	for k := range t.added {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
	return out
}

// tamperStorage changes one mount-pool volume's attachments every few
// hundred milliseconds while the fault is on (bounded by maxTampers).
func tamperStorage(ctx context.Context, n *nemesisEnv) {
	t := n.tamper
	for i := 0; i < maxTampers && ctx.Err() == nil; i++ {
		vol := "ext-" + t.vols[n.rng.IntN(len(t.vols))].ID
		attached, err := hostdir.StorageAttachments(t.root, vol)
		if err == nil {
			if len(attached) > 0 && n.rng.IntN(2) == 0 {
				node := attached[n.rng.IntN(len(attached))]
				if hostdir.StorageDetach(t.root, vol, node) == nil {
					// Stamped after the change: until then the
					// attachment may still be seen.
					t.record(tamperEvent{Time: time.Now(), Volume: vol, Node: node})
					n.notes["storage attachments removed behind claimd's back"]++
				}
			} else if free := without(t.nodes, attached); len(free) > 0 {
				node := free[n.rng.IntN(len(free))]
				// Stamped before the change: from then on it may be seen.
				at := time.Now()
				if hostdir.StorageAttach(t.root, vol, node, false) == nil {
					t.record(tamperEvent{Time: at, Attach: true, Volume: vol, Node: node})
					n.notes["storage attachments added behind claimd's back"]++
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(250+n.rng.IntN(350)) * time.Millisecond):
		}
	}
}

func without(all, drop []string) []string {
	var out []string
	for _, s := range all {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return out
}

// heal removes the orphans the nemesis made that are still on the storage
// and that no claim of claimd's (live or being released) on that node has
// since made its own. With every claim freed (final), every orphan left
// goes. A volume claimd could not be asked about keeps its orphan for the
// final heal.
func (t *tamperer) heal(observe clientAPI, final bool) error {
	orphans := t.orphans()
	if len(orphans) == 0 {
		return nil
	}
	if !final && t.repairWait > 0 {
		// claimd's reconciler repairs the orphans no claim explains
		// (every mount-pool volume is under fence); those it leaves are
		// the ones a claim made its own meanwhile.
		deadline := time.Now().Add(t.repairWait)
		for time.Now().Before(deadline) && len(t.stillAttached(orphans)) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		orphans = t.stillAttached(orphans)
	}
	byExt := map[string]*structs.Volume{}
	if !final {
		var vols []*structs.Volume
		err := retry(15*time.Second, func(ctx context.Context) error {
			var err error
			vols, _, err = observe.Volumes(ctx, "", structs.QueryOptions{})
			return err
		})
		if err != nil {
			return nil // left for the final heal
		}
		for _, v := range vols {
			byExt[v.ExternalID] = v
		}
	}
	for _, o := range orphans {
		vol, node := o[0], o[1]
		if v := byExt[vol]; v != nil && claimsOn(v, t.nodeID[node]) {
			continue
		}
		attached, err := hostdir.StorageAttachments(t.root, vol)
		if err != nil {
			return err
		}
		if !slices.Contains(attached, node) {
			t.forget(o)
			continue
		}
		if err := hostdir.StorageDetach(t.root, vol, node); err != nil {
			return err
		}
		t.record(tamperEvent{Time: time.Now(), Volume: vol, Node: node})
	}
	return nil
}

// stillAttached is the orphans the storage still shows.
func (t *tamperer) stillAttached(orphans [][2]string) [][2]string {
	var out [][2]string
	for _, o := range orphans {
		nodes, err := hostdir.StorageAttachments(t.root, o[0])
		if err != nil || slices.Contains(nodes, o[1]) {
			out = append(out, o)
		}
	}
	return out
}

func (t *tamperer) forget(o [2]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.added, o)
}

func claimsOn(v *structs.Volume, nodeID string) bool {
	for _, c := range v.AllClaims() { // live and being released
		if c.NodeID == nodeID {
			return true
		}
	}
	return false
}

// checkStorageEmpty reads the storage itself once every claim is freed:
// nothing of the mount pool may be left attached (claimd detached what it
// attached, and the orphans were repaired or healed).
func (t *tamperer) checkStorageEmpty(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, v := range t.vols {
			nodes, err := hostdir.StorageAttachments(t.root, "ext-"+v.ID)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				left = append(left, fmt.Sprintf("%s on %s", v.ID, n))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("storage truth: every claim is freed, yet the storage still has %d attachments: %v", len(left), left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refusedFor is the node a hostdir refusal names as already holding the
// volume ("attached to node X", "a writer on node X").
var refusedFor = regexp.MustCompile(`(?:is attached to node|a writer on node) (\S+)`)
