package main

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "2GiB": 2 << 30, "2G": 2 << 30, "500MB": 500e6, "3 MiB": 3 << 20, "7B": 7, "1TB": 1e12,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) exp: %d got: %d (%v)", in, want, got, err)
		}
	}
	for _, bad := range []string{"", "0", "-5", "1.5GiB", "GiB", "12XB", "9999999999TiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) exp: error got: none", bad)
		}
	}
}

func TestParseInterspersed_FlagsAfterArguments(t *testing.T) {
	fs := newFlagSet("t", &strings.Builder{})
	capacity := fs.String("capacity", "", "")
	pos, err := parseInterspersed(fs, []string{"vol1", "-capacity", "2GiB", "extra"})
	if err != nil || *capacity != "2GiB" || strings.Join(pos, " ") != "vol1 extra" {
		t.Fatalf("exp: capacity 2GiB and positional vol1 extra got: %q %q (%v)", *capacity, pos, err)
	}
}
