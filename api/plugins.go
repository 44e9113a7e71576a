package api

import (
	"context"

	"github.com/claimd/claimd/structs"
)

// Plugin.* calls: CSI plugins with their health, as the nodes report them.

// Plugin reads one plugin.
func (c *Client) Plugin(ctx context.Context, id string, q structs.QueryOptions) (*structs.Plugin, structs.QueryMeta, error) {
	out, err := call[structs.PluginResponse](ctx, c, "Plugin.Get", &structs.PluginSpecificRequest{ID: id, QueryOptions: q})
	return out.Plugin, out.QueryMeta, err
}

// Plugins lists plugins.
func (c *Client) Plugins(ctx context.Context, q structs.QueryOptions) ([]*structs.Plugin, structs.QueryMeta, error) {
	out, err := call[structs.PluginListResponse](ctx, c, "Plugin.List", &structs.PluginListRequest{QueryOptions: q})
	return out.Plugins, out.QueryMeta, err
}

// AdmitController admits the controller of pluginID on nodeID to controller
// calls (needs plugin:write). Admitting an admitted controller changes
// nothing; it returns the index of the change.
func (c *Client) AdmitController(ctx context.Context, pluginID, nodeID string) (uint64, error) {
	out, err := call[structs.PluginAdmissionResponse](ctx, c, "Plugin.AdmitController",
		&structs.PluginAdmissionRequest{PluginID: pluginID, NodeID: nodeID})
	return out.Index, err
}

// RevokeController takes the admission of the controller of pluginID on
// nodeID back (needs plugin:write): it is sent no more calls.
func (c *Client) RevokeController(ctx context.Context, pluginID, nodeID string) (uint64, error) {
	out, err := call[structs.PluginAdmissionResponse](ctx, c, "Plugin.RevokeController",
		&structs.PluginAdmissionRequest{PluginID: pluginID, NodeID: nodeID})
	return out.Index, err
}
