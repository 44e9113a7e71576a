package structs

// The text rules (text.go) applied to each request that brings text from
// a node, a plugin or an operator. The endpoints call these on the leader,
// after the request's own Validate and before the log entry is written, so
// the entry carries the checked, sanitised text; the state machine does
// not call them (a log entry written before them replays as it did).

// CleanText refuses a node whose name or plugin identifiers are not
// printable (naming the field) and replaces the node with a copy whose
// free text (plugin health descriptions, providers, fence errors) is
// sanitised: the agent's own value is never changed in place.
func (r *NodeRegisterRequest) CleanText() error {
	n := r.Node
	if n == nil {
		return nil // Validate refuses it
	}
	if err := ValidateName("name", n.Name, MaxNameLen); err != nil {
		return err
	}
	if err := ValidateName("version", n.Version, 64); err != nil {
		return err
	}
	for _, fp := range []struct {
		field string
		m     map[string]*CSIInfo
	}{{"csi_node_plugins", n.CSINodePlugins}, {"csi_controller_plugins", n.CSIControllerPlugins}} {
		for _, id := range SortedKeys(fp.m) {
			if err := fp.m[id].checkText(fp.field + "." + id); err != nil {
				return err
			}
		}
	}
	c := n.Copy()
	for _, m := range []map[string]*CSIInfo{c.CSINodePlugins, c.CSIControllerPlugins} {
		for _, info := range m {
			info.sanitizeText()
		}
	}
	if c.LastFence != nil {
		for _, v := range c.LastFence.Volumes {
			if v != nil {
				v.Error = SanitizeText(v.Error, MaxFreeTextLen)
			}
		}
	}
	r.Node = c
	return nil
}

// checkText: the node plugin's node ID is passed to controllers as CSI's
// node_id, so it is an external ID; topology segments are matched and
// shown, so they are names.
func (i *CSIInfo) checkText(field string) error {
	if i == nil {
		return nil // Validate refuses it
	}
	if i.ExternalNodeID != "" {
		if err := ValidateExternalID(field+".external_node_id", i.ExternalNodeID); err != nil {
			return err
		}
	}
	for _, k := range SortedKeys(i.AccessibleTopology) {
		f := field + ".accessible_topology"
		if err := ValidateName(f, k, maxVolumeValueLen); err != nil {
			return err
		}
		if err := ValidateName(f+"."+k, i.AccessibleTopology[k], maxVolumeValueLen); err != nil {
			return err
		}
	}
	return nil
}

// sanitizeText makes a fingerprint's free text printable and bounded.
func (i *CSIInfo) sanitizeText() {
	if i == nil {
		return
	}
	i.Provider = SanitizeText(i.Provider, maxProviderText)
	i.ProviderVersion = SanitizeText(i.ProviderVersion, maxProviderText)
	// The health description gets what the fingerprint's text bound
	// (MaxFingerprintText, all four fields together) leaves, so that a
	// long probe error is cut rather than refusing the registration.
	room := MaxFingerprintText - len(i.Provider) - len(i.ProviderVersion) - len(i.ExternalNodeID)
	i.HealthDescription = SanitizeText(i.HealthDescription, max(minHealthText, min(MaxFreeTextLen, room)))
}

// maxProviderText bounds a provider name or version (CSI's plugin names
// are at most 63 bytes); minHealthText keeps some of a health description
// even when the other fields take the room (Validate then refuses them).
const (
	maxProviderText = 256
	minHealthText   = 64
)

// CleanText sanitises each update's client description, on copies of the
// updates.
func (r *AllocClientUpdateRequest) CleanText() {
	out := make([]*AllocClientUpdate, len(r.Allocs))
	for i, u := range r.Allocs {
		if u != nil {
			c := *u
			c.ClientDescription = SanitizeText(c.ClientDescription, MaxFreeTextLen)
			u = &c
		}
		out[i] = u
	}
	r.Allocs = out
}

// ValidateEntry is Validate with the text rules for a volume registered
// now: its external ID is given to the plugin, so it must be a safe one.
func (v *Volume) ValidateEntry() error {
	if err := v.Validate(); err != nil {
		return err
	}
	if err := ValidateName("name", v.Name, maxVolumeValueLen); err != nil {
		return err
	}
	return ValidateExternalID("external_id", v.ExternalID)
}
