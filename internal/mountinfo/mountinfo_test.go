package mountinfo

import (
	"strings"
	"testing"
)

func TestUnder_DeepestFirstWithEscapes(t *testing.T) {
	table := `22 1 0:21 / /proc rw - proc proc rw
90 30 8:1 /v1 /tmp/claimd-dev-1/client/csi/per-alloc/web1/pgdata rw - ext4 /dev/sda1 rw
91 30 8:1 /v1 /tmp/claimd-dev-1/client/csi/staging/pgdata rw - ext4 /dev/sda1 rw
92 30 8:1 /v2 /tmp/claimd-dev-1/a\040b rw - ext4 /dev/sda1 rw
93 30 8:1 /v3 /tmp/claimd-dev-10/other rw - ext4 /dev/sda1 rw
`
	got, err := under(strings.NewReader(table), "/tmp/claimd-dev-1/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/tmp/claimd-dev-1/client/csi/per-alloc/web1/pgdata", "/tmp/claimd-dev-1/client/csi/staging/pgdata", "/tmp/claimd-dev-1/a b"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("exp: %q (deepest first, not claimd-dev-10) got: %q", want, got)
	}
}
