package httpapi

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every RPC method a handler calls is in rpcMethods: a route whose method
// is missing answers 500 at run time (a drain route once did), so the
// sources are read here instead.
func TestRoutes_EveryCalledMethodIsAllowed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`s\.rpc\(r, "([A-Za-z]+\.[A-Za-z]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			found++
			if !rpcMethods[m[1]] {
				t.Errorf("%s calls %s exp: in rpcMethods got: missing", f, m[1])
			}
		}
	}
	if found < 20 {
		t.Fatalf("handlers' RPC calls exp: found in the sources got: %d", found)
	}
}
