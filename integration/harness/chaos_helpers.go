package harness

// SetCuts replaces every cut with exactly the given directed pairs
// (from→to), in one step: a link that stays cut across the change never
// sees a moment without its cut. The chaos suite composes its faults (a
// paused server stays cut off while a partition heals) and applies the
// union with this; Heal stays the way to remove everything.
func (n *Network) SetCuts(pairs [][2]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cuts = make(map[[2]string]bool, len(pairs))
	for _, p := range pairs {
		n.cuts[p] = true
	}
	n.notifyLocked()
}
