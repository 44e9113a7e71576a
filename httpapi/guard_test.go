package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A state-changing request a page on another site could send without the
// browser asking first (a form, text/plain, or any request naming another
// origin) is refused before its route runs; JSON from curl, a bodyless
// DELETE and the agent's own page pass.
func TestGuard_RefusesCrossSiteWrites(t *testing.T) {
	s := newTestServer(t)
	cases := []struct {
		name, method, ctype, origin, body string
		want                              int
	}{
		{"form post", "PUT", "application/x-www-form-urlencoded", "", "a=b", http.StatusUnsupportedMediaType},
		{"multipart", "POST", "multipart/form-data; boundary=x", "", "--x--", http.StatusUnsupportedMediaType},
		{"text/plain", "POST", "text/plain;charset=UTF-8", "", `{"id":"v"}`, http.StatusUnsupportedMediaType},
		{"a body without a type", "PUT", "", "", `{"id":"v"}`, http.StatusUnsupportedMediaType},
		{"another site's origin", "DELETE", "", "https://evil.example", "", http.StatusForbidden},
		{"another site's origin with JSON", "PUT", "application/json", "https://evil.example", `{}`, http.StatusForbidden},
		{"JSON", "PUT", "application/json", "", `{}`, 0},
		{"bodyless DELETE", "DELETE", "", "", "", 0},
		{"the agent's own page", "POST", "", "http://claimd.test:4646", "", 0},
		{"a read with any type", "GET", "text/plain", "https://evil.example", "", 0},
	}
	for _, c := range cases {
		var body *strings.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		var r *http.Request
		if body != nil {
			r = httptest.NewRequest(c.method, "http://claimd.test:4646/v1/volume/v", body)
		} else {
			r = httptest.NewRequest(c.method, "http://claimd.test:4646/v1/volume/v", nil)
		}
		if c.ctype != "" {
			r.Header.Set("Content-Type", c.ctype)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		release, ok := s.guard(w, r)
		release()
		switch {
		case c.want == 0 && !ok:
			t.Errorf("%s: exp: passed got: refused %d %s", c.name, w.Code, w.Body)
		case c.want != 0 && (ok || w.Code != c.want):
			t.Errorf("%s: exp: refused %d got: passed %v, %d %s", c.name, c.want, ok, w.Code, w.Body)
		case c.want != 0 && !strings.Contains(w.Body.String(), map[int]string{415: "Content-Type", 403: "Origin"}[c.want]):
			t.Errorf("%s: error exp: names the header got: %s", c.name, w.Body)
		}
	}
}
