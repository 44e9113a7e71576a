package chaos

import (
	"fmt"

	"github.com/claimd/claimd/client"
)

// Stopping and starting the in-process backend's client agents, for the
// fencing nemeses. In one process an agent cannot be killed -9 or frozen:
// StopAgent shuts it down (client.Agent.Shutdown), which, like a crash,
// leaves its mounts and claims as they are and stops its heartbeats and
// lease renewals, but unlike a crash lets it finish what it was doing.
// The network-namespace backend has the real signals.

// StopAgent shuts a client agent down; its mounts stay.
func (ip *inProcess) StopAgent(name string) error {
	ag, ok := ip.agents[name]
	if !ok {
		return fmt.Errorf("inproc: no agent %q", name)
	}
	if ag.a != nil {
		ag.a.Shutdown()
		ag.a = nil
	}
	return nil
}

// StartAgent starts a stopped client agent again on its data dir, with
// the configuration it first started with.
func (ip *inProcess) StartAgent(name string) error {
	ag, ok := ip.agents[name]
	if !ok {
		return fmt.Errorf("inproc: no agent %q", name)
	}
	if ag.a != nil {
		return nil
	}
	a, err := client.New(ag.cfg)
	if err != nil {
		return fmt.Errorf("inproc: restart client %s: %w", name, err)
	}
	ag.a = a
	return nil
}

// Agent is a running client agent, nil while it is stopped.
func (ip *inProcess) Agent(name string) *client.Agent {
	if ag, ok := ip.agents[name]; ok {
		return ag.a
	}
	return nil
}

// AgentDataDir is a client agent's data dir.
func (ip *inProcess) AgentDataDir(name string) string {
	if ag, ok := ip.agents[name]; ok {
		return ag.cfg.DataDir
	}
	return ""
}
