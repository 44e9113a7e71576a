package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/snapshot"
)

func init() {
	registerCommand("operator snapshot save", "save the whole cluster state to an archive (backup)", runSnapshotSave)
	registerCommand("operator snapshot restore", "replace the whole cluster state with an archive's", runSnapshotRestore)
	registerCommand("operator snapshot inspect", "verify an archive offline and count its records per table", runSnapshotInspect)
}

func runSnapshotSave(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("operator snapshot save", stderr)
	cf.register(fs)
	longTimeout(fs)
	stale := fs.Bool("stale", false, "save the contacted server's own state, which may lag the leader's (works without a leader)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd operator snapshot save [flags] FILE")
	}
	path := fs.Arg(0)
	// Written aside and renamed once verified: FILE is never a partial or
	// corrupt archive, and an existing FILE stays until the new one is
	// whole. 0600: the archive holds every secret of the cluster.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	c, ctx, done, err := cf.session()
	if err != nil {
		tmp.Close()
		return fail(stderr, "%v", err)
	}
	defer done()
	meta, err := c.SnapshotSaveWith(ctx, tmp, api.SnapshotOptions{AllowStale: *stale})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fail(stderr, "snapshot save: %v", err)
	}
	fmt.Fprintf(stdout, "Saved snapshot to %s: state at index %d (term %d), taken by %s at %s\n",
		path, meta.Index, meta.Term, meta.Server, meta.Time.Format(time.RFC3339))
	return 0
}

func runSnapshotRestore(args []string, stdout, stderr io.Writer) int {
	var cf cliFlags
	fs := newFlagSet("operator snapshot restore", stderr)
	cf.register(fs)
	longTimeout(fs)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd operator snapshot restore [flags] FILE")
	}
	path := fs.Arg(0)
	// Checked here first for a quick, local answer; the servers check it
	// again, all of it, before anything changes.
	insp, err := inspectFile(path)
	if err != nil {
		return fail(stderr, "snapshot restore: %s: %v (nothing was sent)", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer f.Close()
	c, ctx, done, err := cf.session()
	if err != nil {
		return fail(stderr, "%v", err)
	}
	defer done()
	if err := c.SnapshotRestore(ctx, f); err != nil {
		return fail(stderr, "snapshot restore: %v", err)
	}
	fmt.Fprintf(stdout, "Restored %s: the cluster's state is the archive's (index %d, taken by %s at %s).\n",
		path, insp.Meta.Index, insp.Meta.Server, insp.Meta.Time.Format(time.RFC3339))
	fmt.Fprintln(stdout, "ACL tokens are the archive's now: use a token that was valid when it was taken.")
	return 0
}

func runSnapshotInspect(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("operator snapshot inspect", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 1 {
		return fail(stderr, "usage: claimd operator snapshot inspect [-json] FILE")
	}
	insp, err := inspectFile(fs.Arg(0))
	if err != nil {
		return fail(stderr, "snapshot inspect: %s: %v", fs.Arg(0), err)
	}
	if *asJSON {
		if err := printJSON(stdout, insp); err != nil {
			return fail(stderr, "%v", err)
		}
		return 0
	}
	m := insp.Meta
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Format\t%d\n", m.Format)
	fmt.Fprintf(tw, "Claimd version\t%s\n", orDash(m.ClaimdVersion))
	fmt.Fprintf(tw, "Index\t%d\n", m.Index)
	fmt.Fprintf(tw, "Term\t%d\n", m.Term)
	fmt.Fprintf(tw, "Time\t%s\n", m.Time.Format(time.RFC3339))
	fmt.Fprintf(tw, "Server\t%s (%s)\n", orDash(m.Server), orDash(m.ServerID))
	fmt.Fprintf(tw, "State size\t%d bytes\n", insp.StateSize)
	fmt.Fprintf(tw, "State SHA-256\t%s\n", insp.StateSHA256)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Table\tRecords")
	tables := make([]string, 0, len(insp.Tables))
	for t := range insp.Tables {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		fmt.Fprintf(tw, "%s\t%d\n", t, insp.Tables[t])
	}
	tw.Flush()
	return 0
}

// snapshotTimeout is the default -timeout of save and restore: moving and
// restoring the state of a large cluster takes longer than one call.
const snapshotTimeout = 10 * time.Minute

func longTimeout(fs *flag.FlagSet) {
	f := fs.Lookup("timeout")
	f.DefValue = snapshotTimeout.String()
	_ = f.Value.Set(f.DefValue)
}

func inspectFile(path string) (*snapshot.Inspection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return snapshot.Inspect(f)
}
