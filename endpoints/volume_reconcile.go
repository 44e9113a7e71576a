package endpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Reconciler runs reconciliation rounds on the leader (reconcile.Reconciler).
type Reconciler interface {
	Run(ctx context.Context, pluginID string) (*structs.StorageReport, error)
	Plugins() []string
}

// reconcileTimeout bounds an on-demand round: listing a large storage
// through a controller can take a while, but an operator must get an
// answer.
const reconcileTimeout = 2 * time.Minute

// Reconcile compares the storage with claimd's record now (issue 27) and
// records the rounds: for one volume's plugin, one plugin, or all
// (volume:detach: a round may detach an orphan).
func (v *Volume) Reconcile(args *structs.VolumeReconcileRequest, reply *structs.VolumeReconcileResponse) error {
	_, done, err := v.auth.gate("Volume.Reconcile", args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	plugins := []string{args.PluginID}
	switch {
	case args.VolumeID != "":
		vol, err := v.registered(args.VolumeID)
		if err != nil {
			return err
		}
		plugins = []string{vol.PluginID}
	case args.PluginID == "":
		plugins = v.srv.Reconciler.Plugins()
	}
	ctx, cancel := context.WithTimeout(context.Background(), reconcileTimeout)
	defer cancel()
	for _, id := range plugins {
		r, err := v.srv.Reconciler.Run(ctx, id)
		if err != nil {
			return err
		}
		reply.Reports = append(reply.Reports, r)
		reply.Index = max(reply.Index, r.ModifyIndex)
	}
	return nil
}

// StorageReports reads the last reconciliation rounds (blocking query).
func (v *Volume) StorageReports(args *structs.StorageReportListRequest, reply *structs.StorageReportListResponse) error {
	c, done, err := v.auth.gate("Volume.StorageReports", args, reply, nil)
	if done {
		return err
	}
	if args.PluginID != "" {
		if err := structs.ValidateID("plugin_id", args.PluginID); err != nil {
			return err
		}
	}
	return blockingQuery(v.srv, c, "Volume.StorageReports", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			all, err := state.StorageReports(ws)
			if err != nil {
				return 0, err
			}
			reply.Reports = reply.Reports[:0]
			for _, r := range all {
				if args.PluginID == "" || r.PluginID == args.PluginID {
					reply.Reports = append(reply.Reports, r)
				}
			}
			return state.TableIndex(fsm.TableStorageReports), nil
		})
}

// Storage asks the volume's controller what the storage says of it now,
// recording nothing: what an operator should see before forcing.
func (v *Volume) Storage(args *structs.VolumeStorageRequest, reply *structs.VolumeStorageResponse) error {
	_, done, err := v.auth.gate("Volume.Storage", args, reply, nil)
	if done {
		return err
	}
	vol, err := v.registered(args.VolumeID)
	if err != nil {
		return err
	}
	state := v.srv.State()
	plug, err := state.PluginByID(nil, vol.PluginID)
	if err != nil {
		return err
	}
	if plug == nil {
		return structs.NotFound("plugin", vol.PluginID)
	}
	// One volume through GET_VOLUME when a controller offers it, else the
	// whole listing filtered.
	ext := ""
	for id, c := range plug.Controllers {
		// Only admitted controllers are asked (issue 38).
		if c.Healthy && plug.ControllerAdmitted(id) && c.ControllerCapabilities != nil && c.ControllerCapabilities.GetVolume {
			ext = vol.ExternalID
		}
	}
	req := &structs.ClientCSIControllerListVolumesRequest{CSIControllerQuery: structs.CSIControllerQuery{PluginID: vol.PluginID}, ExternalID: ext}
	var out structs.ClientCSIControllerListVolumesResponse
	if err := csiOf(v.srv).ControllerListVolumes(req, &out); err != nil {
		if ext == "" || !errors.Is(err, structs.ErrNotFound) {
			return err
		}
		// GET_VOLUME says the storage has no such volume.
	}
	reply.Supported, reply.ControllerNodeID = out.PublishedNodes, out.ControllerNodeID
	nodes := map[string]string{}
	for id, info := range plug.Nodes {
		if info.ExternalNodeID != "" {
			nodes[info.ExternalNodeID] = id
		}
	}
	for _, sv := range out.Volumes {
		if sv.ExternalID != vol.ExternalID {
			continue
		}
		reply.Found, reply.Volume = true, sv
		reply.PublishedNodes = map[string]string{}
		for _, n := range sv.PublishedNodes {
			reply.PublishedNodes[n] = nodes[n]
		}
	}
	reply.Index = state.TableIndex(fsm.TableVolumes)
	return nil
}

// refuseIfAbnormal refuses a new claim on a volume that asks for it
// (refuse_claims_when_abnormal) while its plugin's last reconciliation
// round found it abnormal. It is decided here, on the leader before the
// claim is submitted, not in the state machine: storage reports are
// advisory entries an older server may skip (decision 40), so no state
// transition may depend on them. A claim the allocation already holds is
// answered as before. Unschedulable: the client retries, and the next
// round that finds the volume healthy lets the claim through.
func refuseIfAbnormal(state *fsm.StateStore, args *structs.VolumeClaimRequest) error {
	vol, err := state.VolumeByID(nil, args.VolumeID)
	if err != nil || vol == nil || !vol.RefuseClaimsWhenAbnormal {
		return nil
	}
	if c := vol.Claim(args.AllocID); c != nil {
		return nil
	}
	// A node's failed fence makes the volume abnormal too (issue 39): it
	// may still be written there. It is state, but refused here all the
	// same, with the storage's word, as one rule.
	if len(vol.FenceFailures) > 0 {
		f := vol.FenceFailures[0]
		return structs.NewError(structs.CodeUnschedulable, fmt.Sprintf(
			"volume %q is abnormal: it %s; it refuses new claims (refuse_claims_when_abnormal)", vol.ID, f.Warning()))
	}
	report, err := state.StorageReport(nil, vol.PluginID)
	if err != nil || report == nil {
		return nil
	}
	for _, f := range report.ForVolume(vol.ID) {
		if f.Kind == structs.FindingAbnormal {
			return structs.NewError(structs.CodeUnschedulable, fmt.Sprintf(
				"volume %q is abnormal on the storage (%s, since %s) and refuses new claims (refuse_claims_when_abnormal)",
				vol.ID, f.Message, f.FirstSeen.UTC().Format(time.RFC3339)))
		}
	}
	return nil
}
