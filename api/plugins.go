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
