package netlab

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// link is one direction between two hosts.
type link struct{ from, to string }

// fault is what happens to packets on a link; a larger value covers a
// smaller one (a full cut also drops SYNs).
type fault int

const (
	dropSYN fault = iota + 1 // new TCP connections from→to fail; established ones live
	dropAll                  // every packet from→to is lost
)

// tableScript is the nft batch for one host namespace: the table, its
// counter and input chain declared (a no-op when they exist), the chain
// flushed, and rules re-added, all applied atomically by one `nft -f -`.
// Rewriting the whole chain rather than adding and deleting single rules is
// what makes every fault call idempotent.
func tableScript(rules string) string {
	return "table inet chaos {\n" +
		"\tcounter dropped { }\n" +
		"\tchain input { type filter hook input priority filter; policy accept; }\n" +
		"}\n" +
		"flush chain inet chaos input\n" +
		rules
}

// rulesFor renders the rules host to needs for the faults in m: one rule per
// fault kind with the source addresses in an anonymous set. Rules sit on the
// receiver's input hook so a dropped packet is lost silently, as on a broken
// link, instead of failing the sender's syscall with EPERM (see doc.go).
func (l *Lab) rulesFor(to string, m map[link]fault) string {
	var all, syn []string
	for _, from := range l.order {
		switch m[link{from, to}] {
		case dropAll:
			all = append(all, l.hosts[from].addr)
		case dropSYN:
			syn = append(syn, l.hosts[from].addr)
		}
	}
	var b strings.Builder
	if len(all) > 0 {
		fmt.Fprintf(&b, "add rule inet chaos input ip saddr { %s } counter name \"dropped\" drop\n", strings.Join(all, ", "))
	}
	if len(syn) > 0 {
		// A SYN without ACK opens a connection; the SYN-ACK of a connection
		// the other way, and every segment of an established one, pass.
		fmt.Fprintf(&b, "add rule inet chaos input ip saddr { %s } tcp flags & (syn | ack) == syn counter name \"dropped\" drop\n", strings.Join(syn, ", "))
	}
	return b.String()
}

// change edits the wanted faults with edit, then rewrites the rules of every
// host whose rules differ from what is in force (every host when force), one
// nft batch per namespace, namespaces in parallel. A host whose batch fails
// keeps its old rules recorded, so the next change retries it.
//
// hosts are the hosts the call names; they must exist and be distinct (a
// host cut off from itself is a test bug, not a fault).
func (l *Lab) change(what string, force bool, hosts []string, edit func(m map[link]fault)) error {
	seen := map[string]bool{}
	for _, h := range hosts {
		if _, ok := l.hosts[h]; !ok {
			return fmt.Errorf("netlab: %s: unknown host %q (lab has %v)", what, h, l.order)
		}
		if seen[h] {
			return fmt.Errorf("netlab: %s: host %q named twice", what, h)
		}
		seen[h] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	edit(l.faults)

	type job struct{ host, rules string }
	var jobs []job
	for _, h := range l.order {
		rules := l.rulesFor(h, l.faults)
		if force || rules != l.applied[h] {
			jobs = append(jobs, job{h, rules})
		}
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			_, errs[i] = inNetns(l.hosts[j.host].ns, tableScript(j.rules), "nft", "-f", "-")
		})
	}
	wg.Wait()
	var failed []string
	for i, j := range jobs {
		if errs[i] != nil {
			failed = append(failed, errs[i].Error())
			continue
		}
		l.applied[j.host] = j.rules
	}
	if len(failed) > 0 {
		return fmt.Errorf("netlab: %s: %s", what, strings.Join(failed, "; "))
	}
	if len(jobs) == 0 {
		l.t.Logf("netlab: %s: already in force; faults: %s", what, l.describe())
	} else {
		l.t.Logf("netlab: %s: rewrote rules of %d host(s); faults: %s", what, len(jobs), l.describe())
	}
	return nil
}

// describe lists the faults in force, e.g. "a→b drop, c→a syn".
func (l *Lab) describe() string {
	var parts []string
	for k, f := range l.faults {
		kind := "drop"
		if f == dropSYN {
			kind = "syn"
		}
		parts = append(parts, k.from+"→"+k.to+" "+kind)
	}
	if len(parts) == 0 {
		return "none"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// set raises the fault on each link to at least f.
func set(m map[link]fault, f fault, links ...link) {
	for _, k := range links {
		if m[k] < f {
			m[k] = f
		}
	}
}

// Cut drops every packet from→to, one direction only: from's packets never
// reach to, while to's packets still reach from (so a TCP connection either
// way stalls, but a UDP datagram to→from arrives).
func (l *Lab) Cut(from, to string) error {
	return l.change(fmt.Sprintf("cut %s→%s", from, to), false, []string{from, to}, func(m map[link]fault) {
		set(m, dropAll, link{from, to})
	})
}

// Partition drops every packet between a and b, both ways.
func (l *Lab) Partition(a, b string) error {
	return l.change(fmt.Sprintf("partition %s↮%s", a, b), false, []string{a, b}, func(m map[link]fault) {
		set(m, dropAll, link{a, b}, link{b, a})
	})
}

// Isolate cuts host off from every other host of the lab, both ways.
func (l *Lab) Isolate(host string) error {
	return l.change("isolate "+host, false, []string{host}, func(m map[link]fault) {
		for _, o := range l.order {
			if o != host {
				set(m, dropAll, link{host, o}, link{o, host})
			}
		}
	})
}

// Bridge makes b the only path between a and c: a–b and b–c are cleared of
// any fault, a–c is cut both ways. (The classic Jepsen "bridge": b sees a
// majority that a and c cannot form together.)
func (l *Lab) Bridge(a, b, c string) error {
	return l.change(fmt.Sprintf("bridge %s–%s–%s", a, b, c), false, []string{a, b, c}, func(m map[link]fault) {
		for _, k := range []link{{a, b}, {b, a}, {b, c}, {c, b}} {
			delete(m, k)
		}
		set(m, dropAll, link{a, c}, link{c, a})
	})
}

// DropSYN drops TCP SYNs from→to: from can open no new connection to to,
// while connections already established (either way) carry on, and to can
// still connect to from.
func (l *Lab) DropSYN(from, to string) error {
	return l.change(fmt.Sprintf("drop SYN %s→%s", from, to), false, []string{from, to}, func(m map[link]fault) {
		set(m, dropSYN, link{from, to})
	})
}

// Heal removes every fault. It rewrites every host's rules even when the lab
// believes none are in force, so it also recovers from a failed change.
func (l *Lab) Heal() error {
	return l.change("heal", true, nil, func(m map[link]fault) { clear(m) })
}

// Dropped returns how many packets the fault rules have dropped on their way
// into host since the lab was built (the counter survives Heal).
func (l *Lab) Dropped(host string) (uint64, error) {
	h, ok := l.hosts[host]
	if !ok {
		return 0, fmt.Errorf("netlab: unknown host %q", host)
	}
	out, err := inNetns(h.ns, "", "nft", "-j", "list", "counter", "inet", "chaos", "dropped")
	if err != nil {
		return 0, err
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return 0, fmt.Errorf("netlab: parse nft counter of %s: %w", host, err)
	}
	for _, o := range doc.Nftables {
		if o.Counter != nil {
			return o.Counter.Packets, nil
		}
	}
	return 0, fmt.Errorf("netlab: no counter in nft output for %s: %s", host, out)
}
