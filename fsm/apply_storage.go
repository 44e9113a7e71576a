package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/structs"
)

func init() {
	registerCommand(structs.StorageReportRequestType, applyStorageReport)
}

// applyStorageReport keeps a plugin's latest reconciliation round. A round
// that failed keeps the findings of the last round that listed, so a controller outage does not make disagreements vanish.
func applyStorageReport(tx *txn, req *structs.StorageReportRequest) (any, error) {
	if req.Report == nil {
		return nil, structs.Invalid("report", "must be given")
	}
	r := req.Report.Copy()
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.CreateIndex, r.ModifyIndex = tx.index, tx.index
	if raw := tx.get(TableStorageReports, indexID, r.PluginID); raw != nil {
		old := raw.(*structs.StorageReport)
		r.CreateIndex = old.CreateIndex
		if r.Error != "" {
			// The findings (and when they were made) stay those of the
			// last round that listed the storage.
			r.Findings, r.UnknownTruncated = old.Copy().Findings, old.UnknownTruncated
			r.Volumes, r.Known = old.Volumes, old.Known
			r.CheckedAt, r.ControllerNodeID = old.CheckedAt, old.ControllerNodeID
		}
	}
	for i, rep := range req.Repairs {
		if rep == nil || rep.Repair == nil {
			return nil, structs.Invalid(fmt.Sprintf("repairs[%d]", i), "must not be null")
		}
		if err := structs.ValidateID(fmt.Sprintf("repairs[%d].volume_id", i), rep.VolumeID); err != nil {
			return nil, err
		}
		old := getVolume(tx, rep.VolumeID)
		if old == nil {
			continue // deregistered since: the repair has nowhere to go
		}
		v := *old
		rr := *rep.Repair
		v.Repairs = append(append([]*structs.StorageRepair(nil), old.Repairs...), &rr)
		if n := len(v.Repairs) - structs.MaxReleasedClaims; n > 0 {
			v.Repairs = v.Repairs[n:]
		}
		v.ModifyIndex = tx.index
		tx.put(TableVolumes, &v)
	}
	tx.put(TableStorageReports, r)
	return r.ModifyIndex, nil
}

// StorageReport returns a plugin's last reconciliation round, or nil.
func (s *StateStore) StorageReport(ws memdb.WatchSet, pluginID string) (*structs.StorageReport, error) {
	return firstAs[structs.StorageReport](s.first(ws, TableStorageReports, indexID, pluginID))
}

// StorageReports returns every plugin's last round, by plugin ID.
func (s *StateStore) StorageReports(ws memdb.WatchSet) ([]*structs.StorageReport, error) {
	return listAs[structs.StorageReport](s.list(ws, TableStorageReports, indexID))
}
