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

// command is one CLI verb. run returns the exit code: 0 ok, 1 error, 2 done
// only in part (`volume expand` with nodes pending).
type command struct {
	synopsis string
	run      func(args []string, stdout, stderr io.Writer) int
}

// moreCommands holds commands registered by other files' init functions
// (registerCommand), so that a new command group is a new file.
var moreCommands = map[string]command{}

// registerCommand adds a command from an init function.
func registerCommand(name, synopsis string, run func(args []string, stdout, stderr io.Writer) int) {
	if _, dup := moreCommands[name]; dup {
		panic("claimd: command registered twice: " + name)
	}
	moreCommands[name] = command{synopsis, run}
}

func commands() map[string]command {
	cmds := map[string]command{
		"agent":                         {"run a server, a client agent, or both (-dev)", runAgent},
		"operator raft list-peers":      {"list the Raft members", runListPeers},
		"operator raft remove-peer":     {"remove a server from the Raft configuration", runRemovePeer},
		"operator raft transfer-leader": {"move leadership to another server", runTransferLeader},
		"volume register":               {"register or update a volume from a JSON spec", runVolumeRegister},
		"volume status":                 {"show volumes, or one volume", runVolumeStatus},
		"volume deregister":             {"remove a volume", runVolumeDeregister},
		"volume create":                 {"create a volume through its controller plugin from a JSON spec", runVolumeCreate},
		"volume delete":                 {"delete an unclaimed volume through its controller plugin", runVolumeDelete},
		"alloc run":                     {"place an allocation that claims volumes", runAllocRun},
		"alloc stop":                    {"stop allocations (the servers release their claims)", runAllocStop},
		"alloc status":                  {"show allocations, or one", runAllocStatus},
		"node status":                   {"show client nodes, or one", runNodeStatus},
		"plugin status":                 {"show CSI plugins, or one", runPluginStatus},
		"eval list":                     {"show volume-claim GC evals", runEvalList},
		"system gc":                     {"run the claim GC now (never waits for stuck releases)", runSystemGC},
		"volume detach":                 {"release a node's claims on a volume now (-force: node gone for good)", runVolumeDetach},
		"csi-plugin hostdir":            {"run the built-in hostdir CSI plugin", runHostdirPlugin},
		"bench":                         {"drive a running cluster with claims and report throughput and latency", runBench},
	}
	for name, c := range moreCommands {
		cmds[name] = c
	}
	return cmds
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	// Longest match first: "operator raft list-peers" before "operator".
	for n := min(4, len(args)); n >= 1; n-- {
		if c, ok := cmds[strings.Join(args[:n], " ")]; ok {
			return c.run(args[n:], stdout, stderr)
		}
	}
	if len(args) > 0 && args[0] != "-h" && args[0] != "-help" && args[0] != "help" {
		fmt.Fprintf(stderr, "claimd: unknown command %q\n\n", strings.Join(args, " "))
	}
	usage(stderr, cmds)
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		return 0
	}
	return 1
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: claimd <command> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-32s %s\n", n, cmds[n].synopsis)
	}
}
