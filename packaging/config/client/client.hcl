# A claimd client agent, for /etc/claimd/client/ (claimd-client.service
# reads every *.hcl and *.json file there). One file per plugin is fine:
# plugin blocks merge by ID. Keys and flags: docs/operations.md
# "Configuration files".

node_name = "worker1"                   # unique per node
data_dir  = "/var/lib/claimd-client"    # the unit's StateDirectory
http_addr = "127.0.0.1:4646"            # local health and metrics

log_level = "info"
log_json  = true

client {
  enabled = true
  servers = ["10.0.0.1:4647", "10.0.0.2:4647", "10.0.0.3:4647"]

  # How long this node's claims outlive its silence; the node fences
  # itself before the servers move a fence-policy volume elsewhere
  # (docs/operations.md "Node loss").
  node_lease = "30s"

  plugin "hostdir" {
    type   = "node"
    socket = "/run/csi/hostdir.sock"
  }
}

tls {
  ca_file   = "/etc/claimd/tls/claimd-agent-ca.pem"
  cert_file = "/etc/claimd/tls/global-client-claimd.pem"
  key_file  = "/etc/claimd/tls/global-client-claimd-key.pem"
}

# No acl block: ACLs are the servers' to check. A client agent proves who
# it is with its certificate and its node secret.
