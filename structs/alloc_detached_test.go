package structs

import (
	"fmt"
	"strings"
	"testing"
)

// A node's list of the volumes it detached itself is refused, naming the
// field and the problem, when it could not be true or is malformed.
func TestAllocClientUpdate_ValidateDetached(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    AllocClientUpdate
		want string // "" = valid
	}{
		{"none", AllocClientUpdate{ClientStatus: AllocClientRunning}, ""},
		{"terminal", AllocClientUpdate{ClientStatus: AllocClientComplete, DetachedVolumes: []string{"v1", "v2"}}, ""},
		{"on a running status", AllocClientUpdate{ClientStatus: AllocClientRunning, DetachedVolumes: []string{"v1"}},
			`detached_volumes: only a terminal status may carry it, not "running"`},
		{"twice", AllocClientUpdate{ClientStatus: AllocClientFailed, DetachedVolumes: []string{"v1", "v1"}},
			`detached_volumes[1]: "v1" is given twice`},
		{"empty ID", AllocClientUpdate{ClientStatus: AllocClientComplete, DetachedVolumes: []string{""}},
			`detached_volumes[0]`},
		{"more than an allocation may hold", AllocClientUpdate{ClientStatus: AllocClientComplete, DetachedVolumes: manyVolumeIDs(maxAllocVolumes + 1)},
			`detached_volumes: has 65 entries, at most 64 allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.u.ValidateDetached("detached_volumes")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("exp: valid got: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("exp: an error containing %q got: %v", tc.want, err)
			}
		})
	}
}

func manyVolumeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("v%d", i)
	}
	return out
}
