package endpoints

import (
	memdb "github.com/hashicorp/go-memdb"

	"github.com/claimd/claimd/fsm"
	"github.com/claimd/claimd/structs"
)

// Plugin reads the plugins derived from node fingerprints.
type Plugin struct {
	srv  *Deps
	auth *authz
}

// Get reads one plugin.
func (p *Plugin) Get(args *structs.PluginSpecificRequest, reply *structs.PluginResponse) error {
	c, done, err := p.auth.gate("Plugin.Get", args, reply, nil)
	if done {
		return err
	}
	if err := structs.ValidateID("id", args.ID); err != nil {
		return err
	}
	return blockingQuery(p.srv, c, "Plugin.Get", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			plug, err := state.PluginByID(ws, args.ID)
			if err != nil {
				return 0, err
			}
			reply.Plugin = plug
			if plug == nil {
				if args.MinQueryIndex > 0 {
					return state.TableIndex(fsm.TablePlugins), nil
				}
				return 0, structs.NotFound("plugin", args.ID)
			}
			return plug.ModifyIndex, nil
		})
}

// List reads all plugins.
func (p *Plugin) List(args *structs.PluginListRequest, reply *structs.PluginListResponse) error {
	c, done, err := p.auth.gate("Plugin.List", args, reply, nil)
	if done {
		return err
	}
	return blockingQuery(p.srv, c, "Plugin.List", &args.QueryOptions, &reply.QueryMeta,
		func(ws memdb.WatchSet, state *fsm.StateStore) (uint64, error) {
			plugs, err := state.Plugins(ws)
			if err != nil {
				return 0, err
			}
			reply.Plugins = plugs
			return state.TableIndex(fsm.TablePlugins), nil
		})
}
