package structs

import (
	"strings"
	"testing"
)

func TestNodeVersionIsBoundedAndPrintable(t *testing.T) {
	n := &Node{ID: "0b3c8a52-9a5e-4d1b-8b1a-2f1c6e0f7a11", SecretID: "s", Version: strings.Repeat("1", 65)}
	if err := n.Validate(); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("a 65-byte version exp: refused naming version got: %v", err)
	}
	n.Version = "v1\x1b[2J"
	if err := (&NodeRegisterRequest{Node: n}).CleanText(); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("a version with a terminal escape exp: refused naming version got: %v", err)
	}
	n.Version = "v0.9.0"
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
}
