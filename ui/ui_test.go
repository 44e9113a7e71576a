package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler_ServesTheFilesWithTheSecurityHeaders(t *testing.T) {
	h := Handler()
	for path, ctype := range map[string]string{
		"/ui/":          "text/html",
		"/ui/app.js":    "text/javascript",
		"/ui/style.css": "text/css",
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) {
			t.Errorf("GET %s exp: 200 %s got: %d %q", path, ctype, w.Code, w.Header().Get("Content-Type"))
		}
		if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("GET %s Content-Security-Policy exp: %q got: %q", path, ContentSecurityPolicy, got)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s exp: nosniff and DENY got: %v", path, w.Header())
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/nothing.js", nil))
	if w.Code != http.StatusNotFound {
		t.Fatalf("unknown file exp: 404 got: %d", w.Code)
	}
}

// The policy admits no other origin, and the files name none: no CDN, no
// web font, no analytics.
func TestFiles_FetchNothingFromElsewhere(t *testing.T) {
	for _, directive := range strings.Split(ContentSecurityPolicy, ";") {
		if strings.Contains(directive, "http") || strings.Contains(directive, "*") {
			t.Errorf("CSP directive %q exp: no other origin", directive)
		}
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?https?:`)
	err := fs.WalkDir(files, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(data), "\n") {
			// Comments may mention things; code and markup may not fetch them.
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if m := external.FindString(line); m != "" {
				t.Errorf("%s: exp: no external reference got: %q in %q", path, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
