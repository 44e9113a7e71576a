package main

import "io"

func runHostdirPlugin(args []string, stdout, stderr io.Writer) int {
	return fail(stderr, "csi-plugin hostdir: not available yet")
}
