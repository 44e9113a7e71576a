// Package netlab builds a small, disposable network of Linux network
// namespaces for tests that run claimd as real OS processes and break the
// network between them: the lab the chaos suite (integration/chaos) runs its
// three servers and client agents in.
//
// # Shape
//
//	              switch namespace  (cld-<pid>-<n>-sw)
//	            ┌───────────────────────────────────┐
//	            │   br0 (no address, no routes)     │
//	            │   │          │           │        │
//	            │   p0         p1          p2       │
//	            └───┼──────────┼───────────┼────────┘
//	           veth │     veth │      veth │
//	┌───────────────┼──┐ ┌─────┼─────┐ ┌───┼────────────┐
//	│ eth0 10.213.7.10 │ │ eth0 .11  │ │ eth0 .12       │
//	│ lo               │ │ lo        │ │ lo             │
//	│ nft: inet chaos  │ │ nft: …    │ │ nft: …         │
//	└──────────────────┘ └───────────┘ └────────────────┘
//	 host ns cld-<pid>-<n>-h-s1        …-h-s2   …-h-s3
//
// # Why it is built this way
//
// Everything the lab creates lives in namespaces it creates, and nothing in
// the root namespace is touched: no interface, route, sysctl or firewall rule
// of the machine running the tests changes. A test machine is shared (a
// developer's box, a CI runner) and a test that edits the host's network can
// break the machine for everyone when it crashes half way. Namespaces are
// also the one thing a crashed run leaves behind that a later run can find
// and remove by name alone: every name starts with "cld-<pid>-", so New
// deletes the namespaces of earlier runs whose process is gone.
//
// The bridge sits in its own "switch" namespace rather than in the root
// namespace, so the veths never appear on the host and no packet of the
// lab's subnet (10.213.7.0/24, which exists only inside these namespaces) can
// be routed, forwarded or NATed out of the machine: the host namespaces have
// no default route and the switch namespace has no address at all. IPv6 is
// turned off inside the lab's namespaces (their own sysctls), so the lab is
// the one IPv4 subnet and nothing else: no link-local addresses, no router
// solicitations, and no path around a fault, whose rules match IPv4
// addresses. Traffic between hosts crosses a real kernel TCP/IP stack, a
// real bridge and real veth links, so a claimd server sees the same
// connection resets, SYN retransmissions and timeouts it would see on a
// network.
//
// Faults are nftables rules in one table ("inet chaos") per host namespace,
// on the input hook of the receiving host: a cut from→to is a rule in to's
// namespace that drops packets whose source is from. Dropping on receipt
// rather than on send matters: a packet dropped on the sender's output hook
// makes the sending syscall fail with EPERM, which no real network does,
// while a packet dropped on the way in is simply lost, as on a broken link,
// and TCP retransmits into the void. One table per host keeps every host's
// rules independent, lets a change be applied as one atomic `nft -f -`
// batch per affected namespace, and keeps the root namespace's firewall out
// of the picture. All rules feed one named counter per host, so a test can
// prove that a probe was dropped (the counter moved and nothing arrived)
// instead of waiting an arbitrary time for something not to happen.
//
// A process runs inside a host namespace through Lab.Exec (`ip netns exec`,
// which execs the program in place, so the *exec.Cmd's pid is the program's
// pid and signals such as SIGKILL or SIGSTOP reach it directly). The test
// process itself stays in the root namespace and reaches into a host through
// Lab.Dialer and Lab.Listen, which create the socket on a locked OS thread
// switched into the namespace with setns(2); a socket keeps the namespace it
// was created in, so it can then be used from any goroutine. The lab's own
// nft calls are forked from such a thread too (a child starts in its parent
// thread's namespace), which saves the extra process of `ip netns exec` on
// every fault change.
//
// The kernel on the project's machines has no netem qdisc, so latency is
// added by DelayProxy, a TCP proxy in user space that holds each chunk of
// bytes for a delay in each direction.
//
// # Requirements
//
// Root, iproute2 (`ip`) and nftables (`nft`), and a kernel with network
// namespaces, veth, bridge and nf_tables. Available reports what is missing;
// New skips the test with that message, or fails it when the environment
// variable CLAIMD_NETLAB_REQUIRED is set (so that CI, which installs the
// tools, cannot go green by skipping).
package netlab
