# A claimd server, for /etc/claimd/server/ (claimd-server.service reads
# every *.hcl and *.json file there, in lexical order). Change the
# addresses, node name and join list for this host; the keys and their
# flags are in docs/operations.md "Configuration files".

node_name = "server1"              # unique per server
data_dir  = "/var/lib/claimd"      # the unit's StateDirectory
bind      = "10.0.0.1:4647"        # the one RPC and Raft port
http_addr = "10.0.0.1:4646"        # HTTP API and UI, TLS and ACLs as on RPC

log_level = "info"
log_json  = true                   # one JSON object per line, for journald

server {
  enabled            = true
  bootstrap_expect   = 3
  join               = ["10.0.0.2:4647", "10.0.0.3:4647"]
  leave_on_terminate = false       # a restart keeps the server a member
}

# Secure by default: every agent and CLI call uses mutual TLS, and every
# call needs an ACL token (docs/security.md). Make the CA and this
# server's certificate with `claimd tls ca create` and
# `claimd tls cert create -server`, and keep the key readable by the
# claimd user only.
tls {
  ca_file   = "/etc/claimd/tls/claimd-agent-ca.pem"
  cert_file = "/etc/claimd/tls/global-server-claimd.pem"
  key_file  = "/etc/claimd/tls/global-server-claimd-key.pem"
}

acl {
  enabled = true
}

telemetry {
  prometheus_retention = "60s"
  disable_hostname     = true
}
