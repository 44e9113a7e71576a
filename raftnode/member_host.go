package raftnode

import (
	"net"

	"github.com/hashicorp/raft"
)

// MemberHost reports whether remote (host:port) is on the host of a
// server in r's current configuration. Hosts are compared as IP
// addresses; a configuration address given by name is looked up.
func MemberHost(r *raft.Raft, remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		h, _, err := net.SplitHostPort(string(s.Address))
		if err != nil {
			continue
		}
		if sip := net.ParseIP(h); sip != nil {
			if sip.Equal(ip) {
				return true
			}
			continue
		}
		addrs, _ := net.LookupIP(h)
		for _, a := range addrs {
			if a.Equal(ip) {
				return true
			}
		}
	}
	return false
}
