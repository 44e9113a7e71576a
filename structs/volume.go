package structs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// AccessMode is the CSI access mode of a volume.
type AccessMode string

const (
	AccessModeSingleNodeReader      AccessMode = "single-node-reader-only"
	AccessModeSingleNodeWriter      AccessMode = "single-node-writer"
	AccessModeMultiNodeReader       AccessMode = "multi-node-reader-only"
	AccessModeMultiNodeSingleWriter AccessMode = "multi-node-single-writer"
	AccessModeMultiNodeMultiWriter  AccessMode = "multi-node-multi-writer"
	// The two CSI 1.5 modes, which need the plugin's
	// SINGLE_NODE_MULTI_WRITER capability: one allocation on one node, and
	// any number of allocations, writers too, all on one node.
	AccessModeSingleNodeSingleWriter AccessMode = "single-node-single-writer"
	AccessModeSingleNodeMultiWriter  AccessMode = "single-node-multi-writer"
)

// AccessModes lists every valid access mode, in table order.
var AccessModes = []AccessMode{
	AccessModeSingleNodeReader, AccessModeSingleNodeWriter, AccessModeMultiNodeReader,
	AccessModeMultiNodeSingleWriter, AccessModeMultiNodeMultiWriter,
	AccessModeSingleNodeSingleWriter, AccessModeSingleNodeMultiWriter,
}

// NeedsSingleNodeMultiWriter reports whether the mode needs the plugin's
// SINGLE_NODE_MULTI_WRITER capability (CSI 1.5).
func (m AccessMode) NeedsSingleNodeMultiWriter() bool {
	return m == AccessModeSingleNodeSingleWriter || m == AccessModeSingleNodeMultiWriter
}

func (m AccessMode) Valid() bool {
	for _, v := range AccessModes {
		if m == v {
			return true
		}
	}
	return false
}

// AttachmentMode is how the volume is presented to the workload.
type AttachmentMode string

const (
	AttachmentModeFilesystem  AttachmentMode = "file-system"
	AttachmentModeBlockDevice AttachmentMode = "block-device"
)

func (m AttachmentMode) Valid() bool {
	return m == AttachmentModeFilesystem || m == AttachmentModeBlockDevice
}

// MountOptions are passed to the node plugin when staging and publishing.
type MountOptions struct {
	FSType     string   `json:"fs_type,omitempty"`
	MountFlags []string `json:"mount_flags,omitempty"`
}

// Secrets are passed to plugins and never shown: not in logs, not in status
// output, not in JSON.
type Secrets map[string]string

// redacted is what operators see instead of a secret value.
const redacted = "<redacted>"

// MarshalJSON redacts every value so a secret cannot leak through -json
// output or a log line that prints a volume.
func (s Secrets) MarshalJSON() ([]byte, error) {
	out := make(map[string]string, len(s))
	for k := range s {
		out[k] = redacted
	}
	// Without HTML escaping: "<redacted>", not "\u003credacted\u003e",
	// as the rest of the HTTP API and the CLI write it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// String redacts too, for %v in log lines.
func (s Secrets) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%d secrets %v (values redacted)", len(keys), keys)
}

// Volume is a registered CSI volume and the claims on it.
type Volume struct {
	ID             string            `json:"id"`
	Name           string            `json:"name,omitempty"`
	ExternalID     string            `json:"external_id"`
	PluginID       string            `json:"plugin_id"`
	AccessMode     AccessMode        `json:"access_mode"`
	AttachmentMode AttachmentMode    `json:"attachment_mode"`
	MountOptions   *MountOptions     `json:"mount_options,omitempty"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	Context        map[string]string `json:"context,omitempty"`
	Secrets        Secrets           `json:"secrets,omitempty"`
	// Capacity is the volume's size in bytes as the plugin reported it
	// when claimd created the volume (0: unknown, e.g. registered).
	Capacity int64 `json:"capacity,omitempty"`
	// AccessibleTopology is where the storage can be reached: a list of
	// topology segments (as CSI's accessible_topology, from register or
	// create). A node may claim the volume only when its node plugin's
	// segments match one entry (every key of the entry with the same value);
	// empty means reachable from every node.
	AccessibleTopology []map[string]string `json:"accessible_topology,omitempty"`
	// NodeLost is what happens to the volume's claims when their node is
	// lost: wait (the default, also for ""), fence or manual. A claim
	// records the policy it was taken under (EffectiveNodeLost).
	NodeLost NodeLostPolicy `json:"node_lost,omitempty"`

	// The claims, keyed by alloc ID. Only the state machine writes them: a
	// register request's claim fields are ignored. Live claims are taken;
	// past claims are being released and still count against exclusivity
	// until freed (docs/architecture.md, access modes and claims).
	ReadClaims  map[string]*Claim `json:"read_claims,omitempty"`
	WriteClaims map[string]*Claim `json:"write_claims,omitempty"`
	PastClaims  map[string]*Claim `json:"past_claims,omitempty"`
	// Released are the last MaxReleasedClaims freed claims, oldest first,
	// each with its steps up to freed: a freed claim is deleted, and
	// without these its release timeline would go with it. They hold
	// nothing: no rule counts them.
	Released []*Claim `json:"released,omitempty"`
	// Repairs are the last MaxReleasedClaims orphan attachments
	// reconciliation detached from this volume (issue 27): the release
	// timeline of attachments no claim explained.
	Repairs []*StorageRepair `json:"repairs,omitempty"`
	// FenceFailures are the fences of this volume that a node reported
	// failed and has not reported done since (structs.FenceFailure),
	// sorted by node then alloc: the volume may still be written there.
	FenceFailures []*FenceFailure `json:"fence_failures,omitempty"`
	// MutableParameters are the parameters a ControllerModifyVolume set
	// (`claimd volume modify`), recorded once the plugin did it.
	MutableParameters map[string]string `json:"mutable_parameters,omitempty"`
	// Evals are this volume's volume-claim-gc evals, the pending one and
	// the last few finished ones, ordered by CreateIndex then ID. The state
	// store keeps them in the volume's row because every release writes
	// the volume anyway: a separate eval table cost three index writes per
	// eval change (decision 41). They are never encoded with the volume
	// (the eval API serves them, and snapshots write them as eval records),
	// so no RPC, log entry or HTTP answer carries them.
	Evals []*Eval `json:"-" codec:"-"`
	// RefuseClaimsWhenAbnormal: while the last reconciliation round found
	// the volume abnormal (CSI volume health), new claims are refused
	// (unschedulable, naming the condition); claims held stay.
	RefuseClaimsWhenAbnormal bool `json:"refuse_claims_when_abnormal,omitempty"`

	// CurrentAccessMode and CurrentAttachmentMode are the modes the volume
	// is in use with: set by the first claim, kept while any claim (live or
	// past) remains, and reset when the last one is freed. They are what a
	// node that still has the volume attached is using, whatever the
	// registration says.
	CurrentAccessMode     AccessMode     `json:"current_access_mode,omitempty"`
	CurrentAttachmentMode AttachmentMode `json:"current_attachment_mode,omitempty"`

	CreateIndex uint64 `json:"create_index,omitempty"`
	ModifyIndex uint64 `json:"modify_index,omitempty"`
}

// MaxReleasedClaims bounds Volume.Released, so a volume's size does not grow
// with its history.
const MaxReleasedClaims = 5

// ValidateID checks an object ID: 1-128 characters of letters, digits, '.',
// '_' and '-', starting with a letter or digit.
func ValidateID(field, id string) error {
	if id == "" {
		return Invalid(field, "must not be empty")
	}
	if !validID(id) {
		return Invalid(field, fmt.Sprintf("%q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", id))
	}
	return nil
}

// validID is ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ without a regexp: every
// claim checks three IDs, and the regexp was 2% of a busy leader's CPU.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Limits on what one volume may carry, so a single request cannot bloat the
// replicated state.
const (
	maxVolumeMapEntries = 64
	maxVolumeValueLen   = 4096
)

// Validate checks a volume spec as an operator submits it. Errors name the
// field in the JSON spelling the operator wrote.
func (v *Volume) Validate() error {
	if v == nil {
		return Invalid("volume", "must be given")
	}
	if err := ValidateID("id", v.ID); err != nil {
		return err
	}
	if v.ExternalID == "" {
		return Invalid("external_id", "must not be empty")
	}
	if err := ValidateID("plugin_id", v.PluginID); err != nil {
		return err
	}
	if !v.AccessMode.Valid() {
		return Invalid("access_mode", fmt.Sprintf("%q is not one of %v", v.AccessMode, AccessModes))
	}
	if !v.AttachmentMode.Valid() {
		return Invalid("attachment_mode", fmt.Sprintf("%q is not %q or %q", v.AttachmentMode,
			AttachmentModeFilesystem, AttachmentModeBlockDevice))
	}
	if v.AttachmentMode == AttachmentModeBlockDevice && v.MountOptions != nil &&
		(v.MountOptions.FSType != "" || len(v.MountOptions.MountFlags) > 0) {
		return Invalid("mount_options", "not allowed with attachment_mode \"block-device\"")
	}
	if v.MountOptions != nil && len(v.MountOptions.MountFlags) > maxVolumeMapEntries {
		return Invalid("mount_options.mount_flags", fmt.Sprintf("has %d entries, at most %d allowed",
			len(v.MountOptions.MountFlags), maxVolumeMapEntries))
	}
	if !v.NodeLost.Valid() {
		return Invalid("node_lost", fmt.Sprintf("%q is not one of %v", v.NodeLost, NodeLostPolicies))
	}
	if v.Capacity < 0 {
		return Invalid("capacity", fmt.Sprintf("%d must not be negative", v.Capacity))
	}
	// Fixed order, so that a volume with several bad fields gets the same
	// error on every server (Apply results must be deterministic).
	for _, f := range []struct {
		field string
		m     map[string]string
	}{{"parameters", v.Parameters}, {"context", v.Context}, {"secrets", v.Secrets}} {
		if err := validateStringMap(f.field, f.m); err != nil {
			return err
		}
	}
	return validateTopology("accessible_topology", v.AccessibleTopology)
}

// validateTopology bounds a list of topology segments; each entry must
// name at least one segment (an empty entry would match every node and
// silently lift the restriction).
func validateTopology(field string, ts []map[string]string) error {
	if len(ts) > maxVolumeMapEntries {
		return Invalid(field, fmt.Sprintf("has %d entries, at most %d allowed", len(ts), maxVolumeMapEntries))
	}
	for i, seg := range ts {
		if err := validateSegments(fmt.Sprintf("%s[%d]", field, i), seg, false); err != nil {
			return err
		}
	}
	return nil
}

// TopologyAllows reports whether a node whose plugin reports the segments
// nodeSeg may reach the volume: no restriction, or one entry of
// AccessibleTopology whose every segment the node has with the same value.
func (v *Volume) TopologyAllows(nodeSeg map[string]string) bool {
	if len(v.AccessibleTopology) == 0 {
		return true
	}
	for _, want := range v.AccessibleTopology {
		if segmentsMatch(want, nodeSeg) {
			return true
		}
	}
	return false
}

func segmentsMatch(want, have map[string]string) bool {
	for k, val := range want {
		if got, ok := have[k]; !ok || got != val {
			return false
		}
	}
	return true
}

// TopologyText renders AccessibleTopology for messages, the same on every
// server: "[zone=a] [rack=1,zone=b]".
func (v *Volume) TopologyText() string {
	parts := make([]string, len(v.AccessibleTopology))
	for i, seg := range v.AccessibleTopology {
		parts[i] = "[" + FormatSegments(seg) + "]"
	}
	return strings.Join(parts, " ")
}

// validateStringMap bounds a user-supplied map. Keys are checked in sorted
// order so the error, if any, is the same on every server.
func validateStringMap(field string, m map[string]string) error {
	if len(m) > maxVolumeMapEntries {
		return Invalid(field, fmt.Sprintf("has %d entries, at most %d allowed", len(m), maxVolumeMapEntries))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" {
			return Invalid(field, "keys must not be empty")
		}
		if len(k)+len(m[k]) > maxVolumeValueLen {
			return Invalid(field+"."+k, fmt.Sprintf("longer than %d bytes", maxVolumeValueLen))
		}
	}
	return nil
}

// HasClaims reports whether any claim, live or past, holds the volume.
func (v *Volume) HasClaims() bool {
	return len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims) > 0
}

// LiveClaim returns the alloc's live (taken) claim, or nil.
func (v *Volume) LiveClaim(allocID string) *Claim {
	if c, ok := v.WriteClaims[allocID]; ok {
		return c
	}
	return v.ReadClaims[allocID]
}

// Claim returns the alloc's claim, live or past, or nil.
func (v *Volume) Claim(allocID string) *Claim {
	if c := v.LiveClaim(allocID); c != nil {
		return c
	}
	return v.PastClaims[allocID]
}

// AllClaims returns every claim (live, then past) sorted by alloc ID within
// each group, so callers never depend on map order.
func (v *Volume) AllClaims() []*Claim {
	out := make([]*Claim, 0, len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims))
	out = append(out, sortedClaims(v.WriteClaims)...)
	out = append(out, sortedClaims(v.ReadClaims)...)
	return append(out, sortedClaims(v.PastClaims)...)
}

func sortedClaims(m map[string]*Claim) []*Claim {
	out := make([]*Claim, 0, len(m))
	for _, c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out
}

// Copy returns a deep copy; state-store objects are never mutated in place.
func (v *Volume) Copy() *Volume {
	if v == nil {
		return nil
	}
	c := *v
	if v.MountOptions != nil {
		mo := *v.MountOptions
		mo.MountFlags = append([]string(nil), v.MountOptions.MountFlags...)
		c.MountOptions = &mo
	}
	c.Parameters = copyStringMap(v.Parameters)
	c.MutableParameters = copyStringMap(v.MutableParameters)
	c.Context = copyStringMap(v.Context)
	c.Secrets = Secrets(copyStringMap(v.Secrets))
	if v.AccessibleTopology != nil {
		c.AccessibleTopology = make([]map[string]string, len(v.AccessibleTopology))
		for i, seg := range v.AccessibleTopology {
			c.AccessibleTopology[i] = copySegments(seg)
		}
	}
	c.ReadClaims = copyClaims(v.ReadClaims)
	c.WriteClaims = copyClaims(v.WriteClaims)
	c.PastClaims = copyClaims(v.PastClaims)
	if v.Repairs != nil {
		c.Repairs = make([]*StorageRepair, len(v.Repairs))
		for i, r := range v.Repairs {
			rr := *r
			c.Repairs[i] = &rr
		}
	}
	if v.FenceFailures != nil {
		c.FenceFailures = make([]*FenceFailure, len(v.FenceFailures))
		for i, f := range v.FenceFailures {
			ff := *f
			c.FenceFailures[i] = &ff
		}
	}
	// Stored evals are immutable: the state store replaces one, never
	// changes it, so the copy shares them.
	c.Evals = slices.Clone(v.Evals)
	if v.Released != nil {
		c.Released = make([]*Claim, len(v.Released))
		for i, r := range v.Released {
			c.Released[i] = r.Copy()
		}
	}
	return &c
}

func copyClaims(m map[string]*Claim) map[string]*Claim {
	if m == nil {
		return nil
	}
	out := make(map[string]*Claim, len(m))
	for k, c := range m {
		out[k] = c.Copy()
	}
	return out
}

// Sanitize returns a copy fit to show an operator: secrets redacted.
func (v *Volume) Sanitize() *Volume {
	c := v.Copy()
	for k := range c.Secrets {
		c.Secrets[k] = redacted
	}
	return c
}

func copyStringMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// VolumeRegisterRequest registers or updates volumes.
type VolumeRegisterRequest struct {
	Volumes []*Volume
	WriteRequest
}

// VolumeRegisterResponse is a registration's index and the volumes it
// grew: a volume already registered (same plugin and external ID) whose
// spec asks for more capacity than recorded is expanded as `volume expand`
// does. Index is the last entry written (the registration, or the last
// capacity entry), for reads that must see it all; RegisterIndex is the
// registration's.
type VolumeRegisterResponse struct {
	RegisterIndex uint64
	Expanded      []*VolumeExpansion
	WriteMeta
}

// VolumeDeregisterRequest removes volumes.
type VolumeDeregisterRequest struct {
	VolumeIDs []string
	Force     bool
	WriteRequest
}

// VolumeSpecificRequest reads one volume.
type VolumeSpecificRequest struct {
	ID string
	// NodeID is set by a client agent reading with its node secret: a
	// node may read a volume one of its allocations asks for (to learn
	// whether the servers still hold its claim there).
	NodeID string
	QueryOptions
}

// VolumeListRequest lists volumes, optionally of one plugin.
type VolumeListRequest struct {
	PluginID string
	QueryOptions
}

// VolumeResponse carries one volume (nil when not found) .
type VolumeResponse struct {
	Volume *Volume
	QueryMeta
}

// VolumeListResponse carries volumes sorted by ID.
type VolumeListResponse struct {
	Volumes []*Volume
	QueryMeta
}
