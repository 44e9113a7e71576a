// Package tlsutil is mutual TLS for claimd's one port: loading and reloading
// the CA and this agent's certificate, the tls.Config for each side of a
// connection, the role a peer's certificate grants, and generating a CA and
// certificates for the `claimd tls` commands.
//
// # Roles are names in the certificate
//
// Every agent and CLI user holds a certificate signed by the one cluster CA.
// What a peer may do is read from a DNS SAN of the form <role>.<region>.claimd
// (server.global.claimd, client.global.claimd, cli.global.claimd), as Nomad
// and Consul do. A role is therefore chosen when the certificate is issued,
// by whoever holds the CA key, and cannot be claimed by a connecting peer.
// Names of another region grant nothing here, so one CA may serve several
// regions without a client of one being a server of another.
//
// A certificate carrying more than one role name is treated as carrying none
// (RoleNone). Such a certificate is either a mistake or an attempt to make a
// cert handed to a CLI user pass as a server's; picking "the highest" would
// reward the attempt, and picking "the lowest" would hide the mistake until
// something odd happens. Failing closed makes it visible at once, and
// GenerateCert refuses to make one.
//
// # Chain always, hostname on request
//
// Incoming connections always require a client certificate that chains to
// the CA. Outgoing connections always verify the server's chain; with
// VerifyServerHostname they also require server.<region>.claimd, so that a
// client agent's certificate (also signed by the CA) cannot impersonate a
// server. The chain-only mode exists for rolling TLS out to a cluster whose
// certificates predate role names; it is not the default an operator should
// keep.
//
// # Reload without dropping connections
//
// The CA pool and key pair live behind an atomic pointer that every
// handshake reads. Reload builds a complete new set and swaps the pointer
// only if every file loaded and checked, so a half-written file never
// replaces a good certificate. Established connections are not touched: TLS
// checks certificates only at the handshake, and claimd's connections are
// long-lived multiplexed sessions that a certificate rotation must not cut.
package tlsutil
