package hostdir

import (
	"context"
	"os"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type identityServer struct {
	csipb.UnimplementedIdentityServer
	p *Plugin
}

func (s *identityServer) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{
		Name:          s.p.cfg.Name,
		VendorVersion: Version,
		Manifest:      map[string]string{"mode": string(s.p.cfg.Mode)},
	}, nil
}

// GetPluginCapabilities advertises the controller service in every mode.
// Identity describes the plugin, not the process: a node-mode hostdir
// belongs to a plugin whose controller runs in another process on the same
// root, and a CO learns from its node plugin that volumes need a controller
// publish. This is what multi-process CSI drivers commonly do. In node mode
// the Controller RPCs themselves answer Unimplemented.
//
// Expansion is ONLINE: growing a quota needs nothing from the workload.
// VOLUME_ACCESSIBILITY_CONSTRAINTS is advertised only with -topology; a
// plugin without segments has no topology for a CO to honour.
func (s *identityServer) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	service := func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}}
	}
	caps := []*csipb.PluginCapability{
		service(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
			Type: csipb.PluginCapability_VolumeExpansion_ONLINE,
		}}},
	}
	if len(s.p.cfg.Topology) > 0 {
		caps = append(caps, service(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe reports ready while the volumes directory is reachable: without it
// the plugin can do nothing useful.
func (s *identityServer) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	_, err := os.Stat(s.p.store.volumeDir(""))
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
