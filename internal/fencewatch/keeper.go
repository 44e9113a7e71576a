package fencewatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/claimd/claimd/internal/leasefile"
)

// Lapsed reports whether a fence-policy claim's lease cannot be shown
// live at now: the file unreadable (f nil), from another boot, never
// renewed, or past FenceAt. Unlike leasefile.Judge it does not look at
// Stopping: a claim the agent began to unmount and never finished (the
// agent died in the middle) still needs its writer stopped when the
// lease runs out, because the servers move the volume then.
func Lapsed(f *leasefile.File, now int64, bootID string) bool {
	return f == nil || f.BootID != bootID || f.FenceAt == 0 || now >= f.FenceAt
}

// Lapse names one lapse of the lease: the boot and the FenceAt it ran
// out at. A fence done for it is not redone; a later lapse (the agent
// renewed in between, and the workload may have been started again) is
// fenced again.
func Lapse(f *leasefile.File) string {
	if f == nil {
		return "unknown"
	}
	return fmt.Sprintf("%s/%d", f.BootID, f.FenceAt)
}

// MinFenceTimeout is the shortest default bound of one run of the
// keeper's fence command: a short lease's window (500 ms for 2 s) is too
// little for a command that asks a container runtime.
const MinFenceTimeout = time.Second

// FenceTimeout bounds one run of the keeper's fence command: flag when
// set, else the lease's fence window (Deadline - FenceAt, as the agent's
// own fence has), at least MinFenceTimeout. A run that times out is
// killed with its group and run again.
func FenceTimeout(last *leasefile.File, flag time.Duration) time.Duration {
	if flag > 0 {
		return flag
	}
	if last != nil && last.FenceAt > 0 && last.Deadline > last.FenceAt {
		return max(time.Duration(last.Deadline-last.FenceAt), MinFenceTimeout)
	}
	return MinFenceTimeout
}

// Key names a claim in the keeper's records.
func Key(c leasefile.Claim) string { return c.AllocID + "/" + c.VolumeID }

// KeeperState is what the keeper keeps across its own restarts: the
// last lease file it read (so that a keeper started while the file is
// unreadable still knows the claims and their lapse) and the lapse each
// claim was fenced for.
type KeeperState struct {
	Version int             `json:"version"`
	Last    *leasefile.File `json:"last,omitempty"`
	// Done maps a claim (Key) to the lapse (Lapse) its fence command
	// succeeded for.
	Done map[string]string `json:"done"`
}

// StateFile is the keeper's state file in its state dir.
const StateFile = "keeper-state.json"

// LoadKeeperState reads the state in dir; none yet is an empty state.
func LoadKeeperState(dir string) (*KeeperState, error) {
	s := &KeeperState{Version: 1, Done: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	if s.Done == nil {
		s.Done = map[string]string{}
	}
	return s, nil
}

// Save writes the state atomically (synced: a fence recorded done must
// not be forgotten, nor one not done recorded).
func (s *KeeperState) Save(dir string) error {
	s.Version = 1
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+StateFile+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, StateFile)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Observe takes one read of the lease file into the state (f nil: it
// could not be read, and the last file read stands). It reports whether
// anything worth saving changed: the claims, the lapse, a fence record
// dropped because its claim is gone from the file (the agent unmounted
// it). The lapse is saved on every renewal (a small synced write every
// heartbeat): a keeper restarted on an unreadable file must not take an
// old lapse it fenced for the current one, after which the agent renewed
// and the workload may have started again.
func (s *KeeperState) Observe(f *leasefile.File) bool {
	if f == nil {
		return false
	}
	changed := s.Last == nil || Lapse(s.Last) != Lapse(f) || claimKeys(s.Last) != claimKeys(f)
	s.Last = f
	live := map[string]bool{}
	for _, c := range f.Claims {
		live[Key(c)] = true
	}
	for k := range s.Done {
		if !live[k] {
			delete(s.Done, k)
			changed = true
		}
	}
	return changed
}

func claimKeys(f *leasefile.File) string {
	var keys []string
	for _, c := range f.Claims {
		keys = append(keys, Key(c)+"/"+c.NodeLost)
	}
	sort.Strings(keys)
	return fmt.Sprint(keys)
}

// ToFence lists the fence-policy claims whose lease has lapsed at now and
// whose fence command has not yet succeeded for this lapse, with the
// lapse. readOK says whether the file was read this time: when it was
// not, the lease cannot be shown live, and the lapse is the last known
// one's (a fence done for it is not redone).
func (s *KeeperState) ToFence(readOK bool, now int64, bootID string) (claims []leasefile.Claim, lapse string) {
	if s.Last == nil {
		return nil, ""
	}
	f := s.Last
	if readOK && !Lapsed(f, now, bootID) {
		return nil, Lapse(f)
	}
	lapse = Lapse(f)
	for _, c := range f.Claims {
		if c.Fenced() && s.Done[Key(c)] != lapse {
			claims = append(claims, c)
		}
	}
	return claims, lapse
}
