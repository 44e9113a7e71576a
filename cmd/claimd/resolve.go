package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/structs"
)

// Operators type what they see: a node's name (`worker1`) or the first
// characters of an ID (`c844aad6`), as with Nomad. The CLI turns that into
// the full ID before it calls the server: an exact ID first, then a unique
// name, then a unique ID prefix. Two matches are an error listing them; no
// match leaves the argument as it was, for the server's own answer (a
// deregistered node's ID, which no list shows, still reaches `node purge`).

// resolveNode is the ID of the node arg names.
func resolveNode(ctx context.Context, c *api.Client, arg string) (string, error) {
	if arg == "" {
		return "", nil
	}
	n, _, err := c.Node(ctx, arg, structs.QueryOptions{})
	if err == nil && n != nil {
		return n.ID, nil
	}
	if err != nil && !errors.Is(err, structs.ErrNotFound) {
		return "", err
	}
	nodes, _, err := c.Nodes(ctx, structs.QueryOptions{})
	if err != nil {
		return "", err
	}
	var byName, byPrefix []string
	label := map[string]string{}
	for _, n := range nodes {
		label[n.ID] = n.ID + " (" + orDash(n.Name) + ")"
		if n.Name == arg {
			byName = append(byName, n.ID)
		}
		if strings.HasPrefix(n.ID, arg) {
			byPrefix = append(byPrefix, n.ID)
		}
	}
	return pickOne("node", arg, byName, byPrefix, label)
}

// resolveAlloc is the ID of the allocation arg names (its ID or a unique
// prefix of it).
func resolveAlloc(ctx context.Context, c *api.Client, arg string) (string, error) {
	a, _, err := c.Alloc(ctx, arg, structs.QueryOptions{})
	if err == nil && a != nil {
		return a.ID, nil
	}
	if err != nil && !errors.Is(err, structs.ErrNotFound) {
		return "", err
	}
	allocs, _, err := c.Allocs(ctx, "", structs.QueryOptions{})
	if err != nil {
		return "", err
	}
	var byPrefix []string
	label := map[string]string{}
	for _, a := range allocs {
		if strings.HasPrefix(a.ID, arg) {
			byPrefix = append(byPrefix, a.ID)
			label[a.ID] = a.ID + " (node " + a.NodeID + ", " + string(a.ClientStatus) + ")"
		}
	}
	return pickOne("allocation", arg, nil, byPrefix, label)
}

// pickOne chooses the unique name match, else the unique prefix match.
func pickOne(what, arg string, byName, byPrefix []string, label map[string]string) (string, error) {
	for _, set := range [][]string{byName, byPrefix} {
		switch len(set) {
		case 0:
			continue
		case 1:
			return set[0], nil
		default:
			sort.Strings(set)
			var lines []string
			for _, id := range set {
				lines = append(lines, "  "+label[id])
			}
			return "", fmt.Errorf("%q names %d %ss; give more of the ID:\n%s", arg, len(set), what, strings.Join(lines, "\n"))
		}
	}
	return arg, nil
}
