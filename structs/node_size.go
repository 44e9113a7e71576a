package structs

import (
	"fmt"
	"unicode/utf8"
)

// What a node may register, tighter than Validate's limits (which the
// state machine applies to every entry, old ones included, and which
// therefore cannot shrink without changing how an old log replays). The
// servers check these before a registration becomes an entry
// (Node.Register), so what is already in a log stays valid.
//
// A real node runs a handful of CSI plugins, each fingerprint a few
// hundred bytes: the CSI spec bounds a node ID to 256 bytes and a
// topology key and value to 63 characters each (a key may have a 63
// character prefix). Issue 38: 150 nodes with 64+64 fingerprints of
// 4 KiB and 64 topology segments of 4 KiB each added 280 MB to the
// leader and 64 MB to every Raft directory; under these limits the same
// nodes hold at most 16 KiB of fingerprints each.
const (
	// MaxNodePluginsPerKind bounds the node plugins, and separately the
	// controller plugins, of one node.
	MaxNodePluginsPerKind = 16
	// MaxFingerprintText bounds one fingerprint's health description,
	// provider, provider version and external node ID together.
	MaxFingerprintText = 1024
	// MaxControllerCalls bounds a plugin's controller_calls: the release
	// workers (watcher.DefaultWorkers and the like) are the real bound.
	MaxControllerCalls = 256
	// MaxFingerprintSegments bounds one fingerprint's topology segments,
	// and MaxFingerprintSegmentBytes each segment's key and value together.
	MaxFingerprintSegments     = 16
	MaxFingerprintSegmentBytes = 256
	// MaxNodeFingerprintBytes bounds all of a node's fingerprints: their
	// plugin IDs, text and topology.
	MaxNodeFingerprintBytes = 16 << 10
)

// ValidateSize checks a registration against the limits above; the error
// names the field and the limit. Validate's checks come first.
func (n *Node) ValidateSize() error {
	if n == nil {
		return nil
	}
	total := 0
	for _, kind := range []struct {
		field string
		m     map[string]*CSIInfo
	}{{"csi_node_plugins", n.CSINodePlugins}, {"csi_controller_plugins", n.CSIControllerPlugins}} {
		if len(kind.m) > MaxNodePluginsPerKind {
			return Invalid(kind.field, fmt.Sprintf("has %d plugins, at most %d allowed", len(kind.m), MaxNodePluginsPerKind))
		}
		for _, id := range SortedKeys(kind.m) {
			info, f := kind.m[id], kind.field+"."+id
			if info == nil {
				continue // Validate refuses it
			}
			text := len(info.HealthDescription) + len(info.Provider) + len(info.ProviderVersion) + len(info.ExternalNodeID)
			if text > MaxFingerprintText {
				return Invalid(f, fmt.Sprintf("health_description, provider, provider_version and external_node_id are %d bytes together, at most %d allowed",
					text, MaxFingerprintText))
			}
			if info.ControllerCalls < 0 || info.ControllerCalls > MaxControllerCalls {
				return Invalid(f+".controller_calls", fmt.Sprintf("%d is not between 0 and %d", info.ControllerCalls, MaxControllerCalls))
			}
			if len(info.AccessibleTopology) > MaxFingerprintSegments {
				return Invalid(f+".accessible_topology", fmt.Sprintf("has %d segments, at most %d allowed",
					len(info.AccessibleTopology), MaxFingerprintSegments))
			}
			total += len(id) + text
			for _, k := range SortedKeys(info.AccessibleTopology) {
				seg := len(k) + len(info.AccessibleTopology[k])
				if seg > MaxFingerprintSegmentBytes {
					// The key is the agent's text: quoted and cut short.
					return Invalid(f+".accessible_topology", fmt.Sprintf("segment %q: key and value are %d bytes, at most %d allowed",
						k[:min(len(k), 40)], seg, MaxFingerprintSegmentBytes))
				}
				total += seg
			}
		}
	}
	if total > MaxNodeFingerprintBytes {
		return Invalid("csi_node_plugins", fmt.Sprintf("the node's fingerprints (with csi_controller_plugins) are %d bytes, at most %d allowed",
			total, MaxNodeFingerprintBytes))
	}
	return nil
}

// MaxHealthDescription is what an agent reports of a plugin's health
// description: a probe's error text can be long (a gRPC status with its
// details), and the fingerprint must stay within MaxFingerprintText with
// the provider, version and node ID beside it.
const MaxHealthDescription = 512

// ClipText cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
