package endpoints

import (
	"fmt"
	"sort"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// UpdateEligibility makes a node eligible or ineligible for new claims.
// Live claims are not touched: an ineligible node keeps what it holds.
func (n *Node) UpdateEligibility(args *structs.NodeEligibilityRequest, reply *structs.NodeEligibilityResponse) error {
	_, done, err := n.auth.gate("Node.UpdateEligibility", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	_, index, err := n.srv.Apply(structs.NodeEligibilityRequestType, args)
	reply.Index = index
	return err
}

// Drain makes the node ineligible, stops its allocations, and returns the
// plan: which claims are released, in which steps, which of the node's
// plugins must keep serving, and what would block. With DryRun it only
// returns the plan. The releases themselves are the ordinary ones the
// leader's watcher drives; DrainStatus follows them.
func (n *Node) Drain(args *structs.NodeDrainRequest, reply *structs.NodeDrainResponse) error {
	_, done, err := n.auth.gate("Node.Drain", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	plan, err := n.drainPlan(n.srv.State(), args.NodeID)
	if err != nil {
		return err
	}
	reply.Plan = plan
	if args.DryRun {
		return nil
	}
	// Ineligible first, so no new claim lands on the node while its
	// allocations stop.
	_, index, err := n.srv.Apply(structs.NodeEligibilityRequestType,
		&structs.NodeEligibilityRequest{NodeID: args.NodeID, Eligibility: structs.NodeIneligible})
	if err != nil {
		return err
	}
	reply.Index = index
	if len(plan.Allocs) > 0 {
		if _, index, err = n.srv.Apply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: plan.Allocs}); err != nil {
			return err
		}
		reply.Index = index
	}
	n.srv.Logger.Info("draining node", "node", args.NodeID, "allocs", len(plan.Allocs), "claims", len(plan.Volumes))
	return nil
}

func (n *Node) drainPlan(state *fsm.StateStore, nodeID string) (*structs.DrainPlan, error) {
	node, err := state.NodeByID(nil, nodeID)
	if err != nil {
		return nil, err
	}
	if node == nil {
		return nil, structs.NotFound("node", nodeID)
	}
	allocs, err := state.AllocsByNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	vols, err := state.VolumesByClaimNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	plugins := map[string]*structs.Plugin{}
	for _, v := range vols {
		if _, ok := plugins[v.PluginID]; ok {
			continue
		}
		p, err := state.PluginSummary(nil, v.PluginID)
		if err != nil {
			return nil, err
		}
		plugins[v.PluginID] = p
	}
	return structs.PlanDrain(node, allocs, vols, plugins), nil
}

// DrainStatus reports a drain's progress: the allocations and claims on
// the node that are not done yet (a blocking query on both).
func (n *Node) DrainStatus(args *structs.NodeDrainStatusRequest, reply *structs.NodeDrainStatusResponse) error {
	c, done, err := n.auth.gate("Node.DrainStatus", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("node_id", args.NodeID); err != nil {
		return err
	}
	retries := n.srv.Releases.Status()
	return blockingQuery(n.srv, c, "Node.DrainStatus", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			node, err := state.NodeByID(ws, args.NodeID)
			if err != nil {
				return 0, err
			}
			if node == nil {
				return 0, structs.NotFound("node", args.NodeID)
			}
			st := &structs.NodeDrainStatus{NodeID: node.ID, Eligibility: node.Eligibility}
			if st.Eligibility == "" {
				st.Eligibility = structs.NodeEligible
			}
			allocs, err := state.AllocsByNode(ws, node.ID)
			if err != nil {
				return 0, err
			}
			for _, a := range allocs {
				if !a.Terminal() {
					st.AllocsLeft = append(st.AllocsLeft, a.ID)
				}
			}
			vols, err := state.VolumesByClaimNode(ws, node.ID)
			if err != nil {
				return 0, err
			}
			for _, v := range vols {
				for _, cl := range v.AllClaims() {
					if cl.NodeID != node.ID {
						continue
					}
					left := &structs.DrainClaimLeft{VolumeID: v.ID, AllocID: cl.AllocID, State: cl.State}
					if r, ok := retries[v.ID]; ok && r.LastError != "" {
						left.LastError = r.LastError
					}
					st.ClaimsLeft = append(st.ClaimsLeft, left)
				}
			}
			sort.Strings(st.AllocsLeft)
			sort.Slice(st.ClaimsLeft, func(i, j int) bool {
				a, b := st.ClaimsLeft[i], st.ClaimsLeft[j]
				return fmt.Sprint(a.VolumeID, "/", a.AllocID) < fmt.Sprint(b.VolumeID, "/", b.AllocID)
			})
			st.Done = st.Eligibility == structs.NodeIneligible && len(st.AllocsLeft) == 0 && len(st.ClaimsLeft) == 0
			reply.Status = st
			return max(state.TableIndex(fsm.TableAllocs), state.TableIndex(fsm.TableVolumes), state.TableIndex(fsm.TableNodes)), nil
		})
}
