package client

import (
	"context"
	"os"
	"time"

	"github.com/claimd/claimd/csi"
)

// A plugin that went away and came back is seen by its socket, not by the
// probe (issue 41). The probe runs every -plugin-probe-interval (5 s by
// default) and, while the plugin is away, gRPC's connect backoff grows to
// minutes, so a plugin back after a while was seen healthy seconds to
// tens of seconds late, and the release waiting on it waited as long.
// A restarted plugin makes a new socket file (and a dead one removes its
// socket or leaves a stale file); the agent looks at the files often,
// which costs a stat each, and when one changes it reconnects at once,
// probes, and registers again, which is what makes the servers retry the
// releases waiting on this node (watcher.RetryNode) without waiting out
// their backoff. Healthy plugins are still probed at the probe interval.
const (
	// pluginSocketPoll is how often the sockets are looked at.
	pluginSocketPoll = 100 * time.Millisecond
	// pluginReconnectTry bounds the wait for one reconnect; a socket
	// that is there but refuses (a stale file, or its plugin not
	// listening yet) is tried again at the next look. Short, so that a
	// stale file replaced by the restarted plugin's is not waited on.
	pluginReconnectTry = 100 * time.Millisecond
	// pluginReturnWindow is how long a changed socket keeps being tried;
	// after that the probe loop alone watches the plugin.
	pluginReturnWindow = 10 * time.Second
)

// socketSeen is what the agent last saw at a plugin's socket path.
type socketSeen struct {
	fi os.FileInfo // nil: nothing there
}

func lookAtSocket(path string) socketSeen {
	fi, err := os.Stat(path)
	if err != nil {
		return socketSeen{}
	}
	return socketSeen{fi: fi}
}

// same: the same file as before (a restarted plugin's socket is a new
// file; the modification time guards against an inode number reused at
// once).
func (s socketSeen) same(o socketSeen) bool {
	if s.fi == nil || o.fi == nil {
		return s.fi == nil && o.fi == nil
	}
	return os.SameFile(s.fi, o.fi) && s.fi.ModTime().Equal(o.fi.ModTime())
}

// pluginSocketLoop watches every configured plugin's socket until the
// agent stops.
func (a *Agent) pluginSocketLoop() {
	paths := map[string]string{}
	last := map[string]socketSeen{}
	for _, pc := range a.cfg.Plugins {
		path, err := csi.SocketPath(pc.Socket)
		if err != nil {
			continue // validated at start; cannot happen
		}
		paths[pc.ID] = path
		last[pc.ID] = lookAtSocket(path)
	}
	// returning: plugins whose socket appeared or changed and that are
	// not connected yet, with when that was seen.
	returning := map[string]time.Time{}
	tick := time.NewTicker(pluginSocketPoll)
	defer tick.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-tick.C:
		}
		gone, back := false, false
		for id, path := range paths {
			now := lookAtSocket(path)
			if now.same(last[id]) {
				continue
			}
			last[id] = now
			if now.fi != nil {
				returning[id] = time.Now()
			} else {
				delete(returning, id)
				gone = true
			}
		}
		for id, since := range returning {
			c, ok := a.plugins.Client(id)
			if !ok || time.Since(since) > pluginReturnWindow {
				delete(returning, id)
				continue
			}
			ctx, cancel := context.WithTimeout(a.ctx, pluginReconnectTry)
			ready := c.Reconnect(ctx)
			cancel()
			if ready {
				delete(returning, id)
				back = true
			}
		}
		if !gone && !back {
			continue
		}
		// Gone or back: probe now, so the node's fingerprint says so (a
		// change of health registers again through OnChange).
		a.plugins.Refresh(a.ctx)
		if a.ctx.Err() != nil {
			return
		}
		if back {
			// Back: register again even if the fingerprint did not
			// change (a plugin restarted between two probes looks as
			// healthy as before, and a release may have failed on it
			// meanwhile). One register per return, not per look: a
			// plugin in a crash loop costs one per restart.
			a.logger.Debug("plugin socket back; probed, registering again")
			a.wakeHeartbeat()
		}
	}
}
