// Package integration holds the multi-server tests: real Raft on boltdb
// files, real TCP on loopback, clusters formed only by bootstrap-expect.
// The harness subpackage is shared with the chaos tests.
package integration
