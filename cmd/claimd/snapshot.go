package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/snapshot/inspect"
	"github.com/claimd/claimd/structs"
)

func runSnapshotSave(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator snapshot save", stdout, stderr)
	longTimeout(x.fs)
	stale := x.fs.Bool("stale", false, "save the contacted server's own state, which may lag the leader's (works without a leader)")
	// Written aside and renamed once verified: FILE is never a partial or
	// corrupt archive, and an existing FILE stays until the new one is
	// whole. 0600: the archive holds every secret of the cluster.
	var tmp *os.File
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name()) // a no-op once renamed
		}
	}()
	check := func(pos []string) (err error) {
		if len(pos) != 1 {
			return errors.New("usage: claimd operator snapshot save [flags] FILE")
		}
		tmp, err = os.CreateTemp(filepath.Dir(pos[0]), "."+filepath.Base(pos[0])+".tmp-*")
		return err
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, pos []string) int {
		path := pos[0]
		meta, err := c.SnapshotSave(ctx, tmp, api.SnapshotOptions{AllowStale: *stale})
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
			return x.fail("snapshot save: %v", err)
		}
		fmt.Fprintf(stdout, "Saved snapshot to %s: state at index %d (term %d), taken by %s at %s\n",
			path, meta.Index, meta.Term, meta.Server, meta.Time.Format(time.RFC3339))
		return 0
	})
}

func runSnapshotRestore(args []string, stdout, stderr io.Writer) int {
	x := newServerCmd("operator snapshot restore", stdout, stderr)
	longTimeout(x.fs)
	var insp *inspect.Report
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	check := func(pos []string) (err error) {
		if len(pos) != 1 {
			return errors.New("usage: claimd operator snapshot restore [flags] FILE")
		}
		// Checked here first for a quick, local answer; the servers check
		// it again, all of it, before anything changes.
		if insp, err = inspect.File(pos[0]); err != nil {
			return fmt.Errorf("snapshot restore: %s: %v (nothing was sent)", pos[0], err)
		}
		f, err = os.Open(pos[0])
		return err
	}
	return x.run(args, check, func(ctx context.Context, c *api.Client, pos []string) int {
		if err := c.SnapshotRestore(ctx, f, api.SnapshotOptions{}); err != nil {
			return x.fail("snapshot restore: %v", err)
		}
		fmt.Fprintf(stdout, "Restored %s: the cluster's state is the archive's (index %d, taken by %s at %s).\n",
			pos[0], insp.Meta.Index, insp.Meta.Server, insp.Meta.Time.Format(time.RFC3339))
		fmt.Fprintln(stdout, "ACL tokens are the archive's now: use a token that was valid when it was taken.")
		return 0
	})
}

func runSnapshotInspect(args []string, stdout, stderr io.Writer) int {
	x := newCmd("operator snapshot inspect", stdout, stderr).jsonFlag("print JSON")
	pos, ok := x.parse(args, exactly(1, "usage: claimd operator snapshot inspect [-json] FILE"))
	if !ok {
		return 1
	}
	insp, err := inspect.File(pos[0])
	if err != nil {
		return x.fail("snapshot inspect: %s: %v", pos[0], err)
	}
	if x.asJSON {
		return x.json(insp)
	}
	printInspection(stdout, insp)
	return 0
}

// printInspection shows an archive's metadata and its records per table.
func printInspection(w io.Writer, insp *inspect.Report) {
	m := insp.Meta
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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
	for _, t := range structs.SortedKeys(insp.Tables) {
		fmt.Fprintf(tw, "%s\t%d\n", t, insp.Tables[t])
	}
	tw.Flush()
}

// snapshotTimeout is the default -timeout of save and restore: moving and
// restoring the state of a large cluster takes longer than one call.
const snapshotTimeout = 10 * time.Minute

func longTimeout(fs *flag.FlagSet) {
	f := fs.Lookup("timeout")
	f.DefValue = snapshotTimeout.String()
	_ = f.Value.Set(f.DefValue)
}
