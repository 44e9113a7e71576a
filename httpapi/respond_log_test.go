package httpapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/structs"
)

// A failure because the caller went away (a browser tab closed during a
// blocking query) is not a warning; the same failure with the caller
// still there is (issue 30).
func TestWriteError_CallerGoneIsNotAWarning(t *testing.T) {
	var out strings.Builder
	s := &Server{logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info})}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	err := structs.NewError(structs.CodeUnavailable, "context canceled")

	s.writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/volumes?index=5", nil).WithContext(gone), err)
	if strings.Contains(out.String(), "[WARN]") {
		t.Fatalf("caller gone exp: no warning got: %s", out.String())
	}
	s.writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/volumes", nil), err)
	if !strings.Contains(out.String(), "[WARN]  HTTP request failed") {
		t.Fatalf("caller there exp: a warning got: %q", out.String())
	}
}
