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
func (s *identityServer) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
			Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

// Probe reports ready while the volumes directory is reachable: without it
// the plugin can do nothing useful.
func (s *identityServer) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	_, err := os.Stat(s.p.store.volumeDir(""))
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
