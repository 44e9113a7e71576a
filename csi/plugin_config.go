package csi

import (
	"fmt"
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
		default:
			return p, structs.Invalid("csi-plugin", fmt.Sprintf("unknown key %q (want id, type, socket)", k))
		}
	}
	return p, p.Validate()
}
