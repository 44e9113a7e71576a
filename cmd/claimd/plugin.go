package main

import (
	"io"

	"github.com/claimd/claimd/csi/hostdir"
)

func runHostdirPlugin(args []string, stdout, stderr io.Writer) int {
	return hostdir.Main(args, stdout, stderr)
}
