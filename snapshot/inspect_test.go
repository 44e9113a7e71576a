package snapshot_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/claimd/claimd/snapshot"
	"github.com/claimd/claimd/snapshot/inspect"
)

// The tests of package snapshot/inspect live here, beside the sample
// state and archive they share with the archive's tests (export_test.go).

func TestInspect_CountsTheRecordsOfEveryTable(t *testing.T) {
	_, state := snapshot.SampleState(t, 20)
	archive := snapshot.MustArchive(t, snapshot.SampleMeta(), state)
	info, err := snapshot.Read(bytes.NewReader(archive), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	insp, err := inspect.Archive(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	wantTables := map[string]int{"nodes": 1, "plugins": 1, "volumes": 20, "allocs": 1, "evals": 1,
		"acl_policies": 1, "acl_tokens": 1}
	for table, n := range wantTables {
		if insp.Tables[table] != n {
			t.Errorf("records in %s exp: %d got: %d (all: %v)", table, n, insp.Tables[table], insp.Tables)
		}
	}
	if insp.Info != *info {
		t.Fatalf("inspect info exp: %+v got: %+v", *info, insp.Info)
	}
}

// Every cut of the archive, at each sixteenth of its length and at the
// last byte, is refused as corrupt.
func TestInspect_TruncatedIsRefused(t *testing.T) {
	_, state := snapshot.SampleState(t, 200)
	archive := snapshot.MustArchive(t, snapshot.SampleMeta(), state)
	cuts := []int{len(archive) - 1}
	for k := range 16 {
		cuts = append(cuts, len(archive)*k/16)
	}
	for _, n := range cuts {
		if _, err := inspect.Archive(bytes.NewReader(archive[:n])); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("inspect of archive cut to %d of %d bytes exp: ErrCorrupt got: %v", n, len(archive), err)
		}
	}
}

// A state stream of another version inside a valid archive: the archive
// checks pass, inspect (like a restore) refuses the state.
func TestInspect_StateOfAnotherVersionIsRefused(t *testing.T) {
	_, state := snapshot.SampleState(t, 1)
	bad := bytes.Replace(state, []byte("Version\x01"), []byte("Version\x02"), 1)
	if bytes.Equal(bad, state) {
		t.Fatal("test setup: the state's version field was not found")
	}
	_, err := inspect.Archive(bytes.NewReader(snapshot.MustArchive(t, snapshot.SampleMeta(), bad)))
	if !errors.Is(err, snapshot.ErrCorrupt) || !strings.Contains(err.Error(), "snapshot version 2") {
		t.Fatalf("inspect of a version 2 state exp: refused naming the version got: %v", err)
	}
}
