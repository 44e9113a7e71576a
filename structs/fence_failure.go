package structs

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// FenceFailure is a node's word that its fence of one claim on a volume
// failed: the fence command failed, or the unmount did, so a writer on
// that node may still write to the volume (issue 39). The state machine
// records it on the volume from the fence report that came with the
// node's registration, and keeps it until a later report from the same
// node says that claim's fence went through (hook ran, volume
// unmounted), or the node is deregistered (an operator's word that it is
// gone). It is recorded whether or not the servers released the claim
// meanwhile: a release that went on by the lease does not make the
// node's writer stop. Nothing in it is secret: IDs, times and the node's
// sanitised error text.
type FenceFailure struct {
	NodeID  string `json:"node_id"`
	AllocID string `json:"alloc_id"`
	// HookOK and Unmounted are the node's report (FencedVolume).
	HookOK    bool   `json:"hook_ok"`
	Unmounted bool   `json:"unmounted"`
	Error     string `json:"error,omitempty"`
	// FencedAt is when the node began fencing and Done when this
	// volume's fence ended, on the node's clock, as it reported them.
	FencedAt time.Time `json:"fenced_at"`
	Done     time.Time `json:"done"`
	// ReportIndex is the Raft index of the registration that reported it.
	ReportIndex uint64 `json:"report_index"`
}

// MaxFenceFailures bounds Volume.FenceFailures; beyond it the oldest
// reports go (one volume claimed by that many allocations whose fences
// all failed is a cluster an operator is already looking at).
const MaxFenceFailures = 32

// Failed reports whether a fenced volume's report says the fence did not
// go through.
func (v *FencedVolume) Failed() bool { return !v.HookOK || !v.Unmounted }

// What says what failed, for a warning line.
func (f *FenceFailure) What() string {
	what := "unmount failed"
	if !f.HookOK {
		what = "fence command failed"
	}
	if f.Error != "" {
		what += ": " + f.Error
	}
	return what
}

// Warning is the line shown on the volume (status, UI, log).
func (f *FenceFailure) Warning() string {
	return fmt.Sprintf("may still be written on node %s (alloc %s): %s", f.NodeID, f.AllocID, f.What())
}

// SameReport: the same node's same word on the same claim, whichever
// registration carried it (an agent resends its report until one is
// acknowledged).
func (f *FenceFailure) SameReport(o *FenceFailure) bool {
	return f.NodeID == o.NodeID && f.AllocID == o.AllocID && f.HookOK == o.HookOK && f.Unmounted == o.Unmounted &&
		f.Error == o.Error && f.FencedAt.Equal(o.FencedAt) && f.Done.Equal(o.Done)
}

// SortFenceFailures orders failures by node, then alloc: the order they
// are stored and shown in, whatever order the reports came in.
func SortFenceFailures(fs []*FenceFailure) {
	slices.SortFunc(fs, func(a, b *FenceFailure) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.AllocID, b.AllocID))
	})
}

// VolumeHealth is a volume's health as the servers know it: abnormal
// when a node reported a fence of it failed. (What the storage says of
// the volume, CSI volume health, is its plugin's reconciliation report:
// StorageReport, finding "abnormal".)
type VolumeHealth string

const (
	VolumeHealthy  VolumeHealth = "healthy"
	VolumeAbnormal VolumeHealth = "abnormal"
)

// Health is VolumeAbnormal while any fence failure is recorded.
func (v *Volume) Health() VolumeHealth {
	if len(v.FenceFailures) > 0 {
		return VolumeAbnormal
	}
	return VolumeHealthy
}

// FenceReportRequest records the fence report a node's registration
// brought on the volumes it names (FenceReportRequestType). The leader
// writes it after the registration, from the registration's checked and
// sanitised report.
type FenceReportRequest struct {
	NodeID string
	Report *FenceReport
	WriteRequest
}

// Validate names the field at fault.
func (r *FenceReportRequest) Validate() error {
	if err := ValidateID("node_id", r.NodeID); err != nil {
		return err
	}
	if r.Report == nil {
		return Invalid("report", "must not be null")
	}
	return r.Report.Validate()
}
