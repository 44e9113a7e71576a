package endpoints

import (
	"context"
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
// records the rounds: for one volume's plugin, one plugin, or all.
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
