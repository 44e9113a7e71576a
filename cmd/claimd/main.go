// Command claimd is the single binary: the agent (server, client, or both in
// -dev mode), the built-in CSI plugin, and the operator CLI.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one entry of the command table: a verb with its run function,
// or a group of verbs (sub) under one word. run returns the exit code: 0
// ok, 1 error, 2 done only in part (`volume expand` with nodes pending).
type command struct {
	name  string
	usage string // one line for claimd's usage (verbs only)
	run   func(args []string, stdout, stderr io.Writer) int
	sub   []command
}

// commands is the command table, the one place a command is added.
var commands = []command{
	{name: "agent", usage: "run a server, a client agent, or both (-dev)", run: runAgent},
	{name: "exec", usage: "run a command as an allocation's workload, ended when the node lease cannot be shown live", run: runExec},
	{name: "keeper", usage: "run the fence command at the node lease's deadline for workloads claimd does not start", run: runKeeper},
	{name: "bench", usage: "drive a running cluster with claims and report throughput and latency", run: runBench},
	{name: "csi-plugin", sub: []command{
		{name: "hostdir", usage: "run the built-in hostdir CSI plugin", run: runHostdirPlugin},
	}},
	{name: "operator", sub: []command{
		{name: "raft", sub: []command{
			{name: "list-peers", usage: "list the Raft members", run: runListPeers},
			{name: "remove-peer", usage: "remove a server from the Raft configuration", run: runRemovePeer},
			{name: "transfer-leader", usage: "move leadership to another server", run: runTransferLeader},
			{name: "health", usage: "show each server's contact with the leader, log lag and health", run: runRaftHealth},
		}},
		{name: "snapshot", sub: []command{
			{name: "save", usage: "save the whole cluster state to an archive (backup)", run: runSnapshotSave},
			{name: "restore", usage: "replace the whole cluster state with an archive's", run: runSnapshotRestore},
			{name: "inspect", usage: "verify an archive offline and count its records per table", run: runSnapshotInspect},
		}},
	}},
	{name: "volume", sub: []command{
		{name: "init", usage: "write a commented example volume spec (-type register|create, HCL or -json)", run: runVolumeInit},
		{name: "register", usage: "register or update a volume from a spec (HCL or JSON)", run: runVolumeRegister},
		{name: "status", usage: "show volumes, or one volume", run: runVolumeStatus},
		{name: "deregister", usage: "remove a volume", run: runVolumeDeregister},
		{name: "create", usage: "create a volume through its controller plugin from a spec (HCL or JSON)", run: runVolumeCreate},
		{name: "delete", usage: "delete an unclaimed volume through its controller plugin", run: runVolumeDelete},
		{name: "detach", usage: "release a node's claims on a volume now (-force: node gone for good)", run: runVolumeDetach},
		{name: "expand", usage: "grow a volume to -capacity through its plugin, on the controller and the nodes using it", run: runVolumeExpand},
		{name: "modify", usage: "change a volume's mutable parameters through its controller plugin (CSI MODIFY_VOLUME)", run: runVolumeModify},
		{name: "reconcile", usage: "compare the storage's attachments with claimd's record now (exit 2 when they disagree)", run: runVolumeReconcile},
		{name: "snapshot", sub: []command{
			{name: "create", usage: "snapshot a volume through its controller plugin (idempotent by NAME)", run: runSnapshotCreate},
			{name: "list", usage: "list snapshots from the controller plugins (-plugin P: one plugin)", run: runSnapshotList},
			{name: "delete", usage: "delete a snapshot through a plugin's controller", run: runSnapshotDelete},
		}},
	}},
	{name: "alloc", sub: []command{
		{name: "run", usage: "place an allocation that claims volumes", run: runAllocRun},
		{name: "stop", usage: "stop allocations (the servers release their claims)", run: runAllocStop},
		{name: "status", usage: "show allocations, or one", run: runAllocStatus},
	}},
	{name: "node", sub: []command{
		{name: "status", usage: "show client nodes, or one (with its lease and last fence)", run: runNodeStatus},
		{name: "drain", usage: "take a node out of service: no new claims, its allocations stopped, their volumes detached in order", run: runNodeDrain},
		{name: "eligibility", usage: "let a node take new claims (-enable) or not (-disable)", run: runNodeEligibility},
		{name: "deregister", usage: "remove a node gone for good: its allocations lost, its claims waiting for its unmount or -force", run: runNodeDeregister},
		{name: "purge", usage: "free a deregistered node's ID for another secret (its claims still wait for volume detach -force)", run: runNodePurge},
	}},
	{name: "plugin", sub: []command{
		{name: "status", usage: "show CSI plugins, or one", run: runPluginStatus},
		{name: "admit", usage: "admit a node's controller of a plugin to controller calls (PLUGIN NODE; needs plugin:write)", run: runPluginAdmit},
		{name: "revoke", usage: "stop sending controller calls to a node's controller of a plugin (PLUGIN NODE)", run: runPluginRevoke},
	}},
	{name: "eval", sub: []command{
		{name: "list", usage: "show volume-claim GC evals", run: runEvalList},
	}},
	{name: "system", sub: []command{
		{name: "gc", usage: "run the claim GC now (never waits for stuck releases)", run: runSystemGC},
	}},
	{name: "acl", sub: []command{
		{name: "bootstrap", usage: "create the first management token (once per cluster)", run: runACLBootstrap},
		{name: "policy", sub: []command{
			{name: "apply", usage: "create or update an ACL policy from an HCL or JSON file", run: runACLPolicyApply},
			{name: "list", usage: "list ACL policies", run: runACLPolicyList},
			{name: "info", usage: "show one ACL policy with its rules", run: runACLPolicyInfo},
			{name: "delete", usage: "delete an ACL policy", run: runACLPolicyDelete},
		}},
		{name: "token", sub: []command{
			{name: "create", usage: "create an ACL token (its secret is shown this once)", run: runACLTokenCreate},
			{name: "list", usage: "list ACL tokens (without secrets)", run: runACLTokenList},
			{name: "info", usage: "show one ACL token by accessor ID (without its secret)", run: runACLTokenInfo},
			{name: "self", usage: "show the token in use (-token or $CLAIMD_TOKEN)", run: runACLTokenSelf},
			{name: "delete", usage: "delete an ACL token by accessor ID", run: runACLTokenDelete},
		}},
	}},
	{name: "config", sub: []command{
		{name: "validate", usage: "check agent configuration files as `agent -config` loads them, without starting anything", run: runConfigValidate},
	}},
	{name: "completion", usage: "print a bash or zsh completion script (claimd completion bash|zsh)", run: runCompletion},
	{name: "version", usage: "print the version, the git commit and the Go version (also -version)", run: runVersion},
	{name: "tls", sub: []command{
		{name: "ca", sub: []command{
			{name: "create", usage: "create a CA for agent and CLI certificates", run: runTLSCACreate},
		}},
		{name: "cert", sub: []command{
			{name: "create", usage: "create a server, client or CLI certificate signed by the CA", run: runTLSCertCreate},
		}},
	}},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-version" || args[0] == "--version") {
		return runVersion(nil, stdout, stderr)
	}
	if c, rest := lookup(commands, args); c != nil {
		return runEscaped(c, args[0], rest, stdout, stderr) // safe_output.go
	}
	// A group's words with no verb after them (`claimd alloc -h`,
	// `claimd volume`) list that group's verbs.
	prefix, group := lookupGroup(commands, args)
	rest := args[len(prefix):]
	help := len(rest) == 0 || rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help" || rest[0] == "help"
	switch {
	case len(prefix) > 0 && len(rest) == 0:
		fmt.Fprintf(stderr, "claimd %s: which command? One of:\n\n", strings.Join(prefix, " "))
		help = false
	case !help:
		fmt.Fprintf(stderr, "claimd: unknown command %q\n\n", strings.Join(args, " "))
	}
	usageOf(stderr, prefix, group)
	if help {
		return 0
	}
	return 1
}

// lookupGroup walks args' leading words down the groups of table and
// returns the words that named groups and the last group's table.
func lookupGroup(table []command, args []string) ([]string, []command) {
	var prefix []string
	for len(args) > 0 {
		found := false
		for _, c := range table {
			if c.name == args[0] && c.sub != nil {
				prefix, table, args, found = append(prefix, c.name), c.sub, args[1:], true
				break
			}
		}
		if !found {
			break
		}
	}
	return prefix, table
}

// lookup walks the table along args' leading words to a verb and returns
// it with the arguments after its name; nil when args name no verb (none,
// an unknown word, or a group without one of its verbs).
func lookup(table []command, args []string) (*command, []string) {
	if len(args) == 0 {
		return nil, nil
	}
	for i := range table {
		c := &table[i]
		switch {
		case c.name != args[0]:
		case c.sub != nil:
			return lookup(c.sub, args[1:])
		default:
			return c, args[1:]
		}
	}
	return nil, nil
}

// usage lists every verb by its full name, in order.
func usage(w io.Writer) { usageOf(w, nil, commands) }

// usageOf lists the verbs of one group (prefix names it; none: all).
func usageOf(w io.Writer, prefix []string, commands []command) {
	name := strings.Join(append([]string{"claimd"}, prefix...), " ")
	fmt.Fprintf(w, "usage: %s <command> [flags]\n", name)
	fmt.Fprintln(w)
	var lines [][2]string
	var walk func(prefix string, table []command)
	walk = func(prefix string, table []command) {
		for _, c := range table {
			if c.sub != nil {
				walk(prefix+c.name+" ", c.sub)
			} else {
				lines = append(lines, [2]string{prefix + c.name, c.usage})
			}
		}
	}
	walk(strings.Join(append(prefix, ""), " "), commands)
	sort.Slice(lines, func(i, j int) bool { return lines[i][0] < lines[j][0] })
	for _, l := range lines {
		fmt.Fprintf(w, "  %-32s %s\n", l[0], l[1])
	}
}
