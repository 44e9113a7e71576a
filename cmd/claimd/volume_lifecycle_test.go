package main

import (
	"strings"
	"testing"
)

func TestParseInterspersed_FlagsAfterArguments(t *testing.T) {
	fs := newFlagSet("t", &strings.Builder{})
	capacity := fs.String("capacity", "", "")
	pos, err := parseInterspersed(fs, []string{"vol1", "-capacity", "2GiB", "extra"})
	if err != nil || *capacity != "2GiB" || strings.Join(pos, " ") != "vol1 extra" {
		t.Fatalf("exp: capacity 2GiB and positional vol1 extra got: %q %q (%v)", *capacity, pos, err)
	}
}
