package client

// Health is what the agent's health check (GET /v1/agent/health) needs:
// whether the servers hear from this node, and each plugin's last probe.
type Health struct {
	// ServerSession: a session to a server is open and the servers
	// accepted this node's last register or heartbeat. False while the
	// node could be marked down for want of heartbeats.
	ServerSession bool
	// Plugins by ID: the last probe's verdict.
	Plugins map[string]PluginHealth
}

// PluginHealth is one configured plugin's last probe.
type PluginHealth struct {
	Healthy     bool
	Description string
}

// Health reports the agent's health now. Safe for concurrent use; it
// makes no calls (the heartbeat loop and the plugin prober keep it fresh;
// a plugin's socket going or coming back triggers a probe at once,
// plugin_sockets.go).
func (a *Agent) Health() Health {
	h := Health{ServerSession: a.heartbeatOK.Load() && a.conn.live(), Plugins: map[string]PluginHealth{}}
	for _, fp := range a.plugins.Fingerprints() {
		h.Plugins[fp.ID] = PluginHealth{Healthy: fp.Healthy, Description: fp.HealthDescription}
	}
	return h
}
