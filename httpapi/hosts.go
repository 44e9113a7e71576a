package httpapi

import (
	"net"
	"os"
	"strings"
)

// DNS rebinding: a page on a domain the attacker controls can point that
// domain at this agent's address (127.0.0.1) once the page has loaded;
// the browser then treats the agent as the page's own origin, so neither
// the cross-origin check nor the JSON-only rule (guard.go) refuses its
// requests. What it cannot change is the name it addressed: the Host
// header carries the attacker's domain. Over plain HTTP the API therefore
// answers only requests addressed to an IP address, localhost, this
// machine's own name or a name the operator allowed (-http-allowed-hosts).
// With TLS the check is not needed (the page's name is not in the agent's
// certificate, and the browser has no client certificate for it) and not
// made, so any name in the certificate keeps working.

// allowedHosts is the set of names a plain-HTTP request may address:
// localhost, this machine's name (and its first label) and the extra ones
// given, all lower case.
func allowedHosts(extra []string) map[string]bool {
	hosts := map[string]bool{"localhost": true}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts[normalHost(name)] = true
		short, _, _ := strings.Cut(name, ".")
		hosts[normalHost(short)] = true
	}
	for _, h := range extra {
		hosts[normalHost(h)] = true
	}
	return hosts
}

// hostAllowed says whether a request addressed to host (the Host header,
// with or without a port) is served. Always with TLS; over plain HTTP for
// an IP address, a name in s.hosts, or no Host at all (HTTP/1.0, which no
// browser sends).
func (s *Server) hostAllowed(host string) bool {
	if s.hosts == nil || host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil {
		return true
	}
	return s.hosts[normalHost(host)]
}

// normalHost is a name as compared: lower case, without a trailing dot.
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}
