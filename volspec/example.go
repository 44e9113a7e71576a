package volspec

import "fmt"

// Example returns the commented example spec `claimd volume init` writes:
// typ "register" (a volume that exists on the storage) or "create" (one
// the plugin makes), in HCL or, without comments, in JSON.
func Example(typ string, asJSON bool) (string, error) {
	switch {
	case typ == "register" && !asJSON:
		return registerExampleHCL, nil
	case typ == "register":
		return registerExampleJSON, nil
	case typ == "create" && !asJSON:
		return createExampleHCL, nil
	case typ == "create":
		return createExampleJSON, nil
	}
	return "", fmt.Errorf("type: %q is not register or create", typ)
}

const registerExampleHCL = `# A volume that already exists on the storage, for
#   claimd volume register volume.hcl
# (claimd volume init -type create writes one for a plugin to make).

id          = "pgdata"          # claimd's name for it, unique in the cluster
name        = "postgres data"   # for humans
external_id = "pgdata"          # the storage's own ID for it
plugin_id   = "hostdir"         # the CSI plugin that serves it

# How allocations may use it: one capability for a registered volume.
# access_mode: single-node-reader-only, single-node-writer,
#   single-node-single-writer, single-node-multi-writer,
#   multi-node-reader-only, multi-node-single-writer, multi-node-multi-writer
# attachment_mode: file-system or block-device
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

# Its size, when known: bytes, or with a unit ("10GiB", "500M", "1TB").
capacity = "10GiB"

# What the servers do when the node holding it is lost: "wait" for the
# node (the default), "fence" (move it once the node's lease has run out)
# or "manual" (an operator decides). docs/operations.md "Node loss".
node_lost = "wait"

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

# Passed to the plugin as they are.
parameters {
  tier = "fast"
}

# Passed to the plugin, never shown or logged.
secrets {
  token = "replace-me"
}
`

const registerExampleJSON = `{
  "id": "pgdata",
  "name": "postgres data",
  "external_id": "pgdata",
  "plugin_id": "hostdir",
  "access_mode": "single-node-writer",
  "attachment_mode": "file-system",
  "capacity": "10GiB",
  "node_lost": "wait",
  "mount_options": {"fs_type": "ext4", "mount_flags": ["noatime"]},
  "parameters": {"tier": "fast"},
  "secrets": {"token": "replace-me"}
}
`

const createExampleHCL = `# A volume for its plugin to make, for
#   claimd volume create volume.hcl
# Creating again with the same id finds the same storage (CSI creates by
# name); a larger capacity_min grows it.

id        = "pgdata"
name      = "postgres data"
plugin_id = "hostdir"

# The size range: bytes, or with a unit ("10GiB", "500M", "1TB").
capacity_min = "10GiB"
capacity_max = "20GiB"

# Every capability the volume must support; the first is how it is
# registered. Modes as in claimd volume init -type register.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

parameters {
  tier = "fast"
}

secrets {
  token = "replace-me"
}

# Where the volume must (required) or should (preferred) be reachable:
# each topology block is one set of segments, as the plugin reports them.
topology_request {
  required {
    topology {
      segments {
        zone = "a"
      }
    }
  }
}

# Content to start from, at most one of them:
# snapshot_id = "snap-1"
# clone_id    = "othervolume"
`

const createExampleJSON = `{
  "id": "pgdata",
  "name": "postgres data",
  "plugin_id": "hostdir",
  "capacity_min": "10GiB",
  "capacity_max": "20GiB",
  "capabilities": [
    {"access_mode": "single-node-writer", "attachment_mode": "file-system"},
    {"access_mode": "single-node-reader-only", "attachment_mode": "file-system"}
  ],
  "mount_options": {"fs_type": "ext4", "mount_flags": ["noatime"]},
  "parameters": {"tier": "fast"},
  "secrets": {"token": "replace-me"},
  "topology_request": {"required": [{"zone": "a"}]}
}
`
