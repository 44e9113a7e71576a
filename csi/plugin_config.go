package csi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/claimd/claimd/structs"
)

// PluginType says which CSI services a configured plugin runs on this node.
type PluginType string

const (
	PluginTypeNode       PluginType = "node"
	PluginTypeController PluginType = "controller"
	PluginTypeMonolith   PluginType = "monolith"
)

// Valid reports whether t is one of the three types.
func (t PluginType) Valid() bool {
	return t == PluginTypeNode || t == PluginTypeController || t == PluginTypeMonolith
}

// HasNode reports whether the plugin serves the Node service here.
func (t PluginType) HasNode() bool { return t == PluginTypeNode || t == PluginTypeMonolith }

// HasController reports whether the plugin serves the Controller service here.
func (t PluginType) HasController() bool {
	return t == PluginTypeController || t == PluginTypeMonolith
}

// PluginConfig is one plugin the agent was told about.
type PluginConfig struct {
	ID     string
	Type   PluginType
	Socket string // "unix:///path" or a plain path
	// ControllerCalls is how many ControllerUnpublish calls the servers
	// may send this plugin's controllers at once (0: one at a time, the
	// safe default for back ends that do not tolerate concurrent attach
	// changes). Only a controller's own setting counts (decision 57).
	ControllerCalls int
}

// Validate checks the fields; errors are coded invalid.
func (p PluginConfig) Validate() error {
	if err := structs.ValidateID("csi plugin id", p.ID); err != nil {
		return err
	}
	if !p.Type.Valid() {
		return structs.Invalid("csi plugin type", fmt.Sprintf("%q is not node, controller or monolith", p.Type))
	}
	if _, err := SocketPath(p.Socket); err != nil {
		return structs.Invalid("csi plugin socket", err.Error())
	}
	if p.ControllerCalls < 0 || p.ControllerCalls > structs.MaxControllerCalls {
		return structs.Invalid("csi plugin controller_calls", fmt.Sprintf("%d is not between 1 and %d", p.ControllerCalls, structs.MaxControllerCalls))
	}
	if p.ControllerCalls > 0 && !p.Type.HasController() {
		return structs.Invalid("csi plugin controller_calls", fmt.Sprintf("is for controller and monolith plugins, not %s", p.Type))
	}
	return nil
}

// ParsePluginConfig reads the agent's -csi-plugin flag value,
// "id=ID,type=node|controller|monolith,socket=PATH".
func ParsePluginConfig(s string) (PluginConfig, error) {
	var p PluginConfig
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return p, structs.Invalid("csi-plugin", fmt.Sprintf("%q is not key=value", kv))
		}
		switch k {
		case "id":
			p.ID = v
		case "type":
			p.Type = PluginType(v)
		case "socket":
			p.Socket = v
		case "controller_calls":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return p, structs.Invalid("csi-plugin controller_calls", fmt.Sprintf("%q is not a whole number from 1 to %d", v, structs.MaxControllerCalls))
			}
			p.ControllerCalls = n
		default:
			return p, structs.Invalid("csi-plugin", fmt.Sprintf("unknown key %q (want id, type, socket, controller_calls)", k))
		}
	}
	return p, p.Validate()
}
