package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// PluginInfo is what GetPluginInfo reports.
type PluginInfo struct {
	Name          string
	VendorVersion string
	Manifest      map[string]string
}

// PluginCapabilities is what GetPluginCapabilities reports, reduced to what
// claimd uses.
type PluginCapabilities struct {
	// ControllerService: the plugin serves the Controller service.
	ControllerService bool
	// AccessibilityConstraints: volumes are not reachable from every node.
	AccessibilityConstraints bool
}

// GetPluginInfo asks the plugin for its name and version.
func (c *Client) GetPluginInfo(ctx context.Context) (*PluginInfo, error) {
	resp, err := invoke(ctx, c, "GetPluginInfo", &csipb.GetPluginInfoRequest{}, c.identity.GetPluginInfo)
	if err != nil {
		return nil, err
	}
	return &PluginInfo{Name: resp.GetName(), VendorVersion: resp.GetVendorVersion(), Manifest: resp.GetManifest()}, nil
}

// GetPluginCapabilities asks which services the plugin offers.
func (c *Client) GetPluginCapabilities(ctx context.Context) (*PluginCapabilities, error) {
	resp, err := invoke(ctx, c, "GetPluginCapabilities", &csipb.GetPluginCapabilitiesRequest{}, c.identity.GetPluginCapabilities)
	if err != nil {
		return nil, err
	}
	out := &PluginCapabilities{}
	for _, pc := range resp.GetCapabilities() {
		switch pc.GetService().GetType() {
		case csipb.PluginCapability_Service_CONTROLLER_SERVICE:
			out.ControllerService = true
		case csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			out.AccessibilityConstraints = true
		}
	}
	return out, nil
}

// Probe asks whether the plugin is ready. A response without the optional
// ready field means ready, as the CSI spec says.
func (c *Client) Probe(ctx context.Context) (bool, error) {
	resp, err := invoke(ctx, c, "Probe", &csipb.ProbeRequest{}, c.identity.Probe)
	if err != nil {
		return false, err
	}
	if resp.GetReady() == nil {
		return true, nil
	}
	return resp.GetReady().GetValue(), nil
}
