package main

import (
	"context"
	"errors"
	"io"

	"github.com/claimd/claimd/api"
)

// runPluginAdmit is `claimd plugin admit PLUGIN NODE`: the node's
// controller of the plugin starts receiving controller calls, volume
// secrets included (issue 38). `plugin status PLUGIN` lists the pending.
func runPluginAdmit(args []string, stdout, stderr io.Writer) int {
	return runPluginAdmission("plugin admit", args, stdout, stderr, func(ctx context.Context, c *api.Client, plugin, node string) error {
		_, err := c.AdmitController(ctx, plugin, node)
		return err
	}, "Controller of plugin %s on node %s admitted\n")
}

// runPluginRevoke is `claimd plugin revoke PLUGIN NODE`.
func runPluginRevoke(args []string, stdout, stderr io.Writer) int {
	return runPluginAdmission("plugin revoke", args, stdout, stderr, func(ctx context.Context, c *api.Client, plugin, node string) error {
		_, err := c.RevokeController(ctx, plugin, node)
		return err
	}, "Controller of plugin %s on node %s revoked: it receives no more calls\n")
}

func runPluginAdmission(name string, args []string, stdout, stderr io.Writer,
	do func(ctx context.Context, c *api.Client, plugin, node string) error, done string) int {
	x := newServerCmd(name, stdout, stderr).nodeAt(1)
	usage := "usage: claimd " + name + " PLUGIN NODE"
	return x.run(args, func(pos []string) error {
		if len(pos) != 2 {
			return errors.New(usage)
		}
		return nil
	}, func(ctx context.Context, c *api.Client, pos []string) int {
		return x.done(do(ctx, c, pos[0], pos[1]), name, done, pos[0], pos[1])
	})
}
