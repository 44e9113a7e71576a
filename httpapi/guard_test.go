package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveWithHeaders serves one request through the whole handler (guard and
// route; the test server's RPC address answers nothing, so a request the
// guard lets through ends 400 or 503, never 403 or 415) and returns the
// status and error.
func serveWithHeaders(s *Server, method, target, ctype string, header map[string]string, body io.Reader) (int, errorBody) {
	r := apiRequest(method, target, body)
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var eb errorBody
	_ = json.Unmarshal(w.Body.Bytes(), &eb)
	return w.Code, eb
}

// A state-changing request a page on another site could send without the
// browser asking first (a form, multipart, text/plain, or any request a
// browser marks as coming from another origin) is refused before its
// route runs, with a message naming the header; JSON from curl, a
// bodyless DELETE or POST, an archive to the snapshot routes, and the
// agent's own page pass.
func TestGuard_RefusesCrossSiteWrites(t *testing.T) {
	s := newTestServer(t)
	const vol = "http://claimd.test:4646/v1/volume/v"
	cases := []struct {
		name, method, target, ctype, body string
		header                            map[string]string
		want                              int // 0: passed to the route
	}{
		{"form post", "PUT", vol, "application/x-www-form-urlencoded", "a=b", nil, http.StatusUnsupportedMediaType},
		{"multipart", "POST", vol, "multipart/form-data; boundary=x", "--x--", nil, http.StatusUnsupportedMediaType},
		{"text/plain", "POST", vol, "text/plain;charset=UTF-8", `{"id":"v"}`, nil, http.StatusUnsupportedMediaType},
		{"text/plain in capitals", "POST", vol, "Text/Plain", `{"id":"v"}`, nil, http.StatusUnsupportedMediaType},
		{"a body without a type", "PUT", vol, "", `{"id":"v"}`, nil, http.StatusUnsupportedMediaType},
		{"a type list a browser reads as text/plain", "PUT", vol, "application/json, text/plain", `{"id":"v"}`, nil, http.StatusUnsupportedMediaType},
		{"a type that is not JSON", "PUT", vol, "application/xml", `<v/>`, nil, http.StatusUnsupportedMediaType},
		{"an archive type on a JSON route", "PUT", vol, "application/octet-stream", `{"id":"v"}`, nil, http.StatusUnsupportedMediaType},
		{"a form type and no body", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "application/x-www-form-urlencoded", "", nil, http.StatusUnsupportedMediaType},
		{"another site's origin", "DELETE", vol, "", "", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"another site's origin with JSON", "PUT", vol, "application/json", `{}`, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"another port of the same host", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "", "", map[string]string{"Origin": "http://claimd.test:8080"}, http.StatusForbidden},
		{"an opaque origin (sandboxed frame)", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "", "", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"a browser's cross-site mark", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a browser's same-site mark", "DELETE", vol, "", "", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"JSON", "PUT", vol, "application/json", `{}`, nil, 0},
		{"JSON with a charset", "PUT", vol, "application/json; charset=utf-8", `{}`, nil, 0},
		{"bodyless DELETE", "DELETE", vol, "", "", nil, 0},
		{"bodyless POST (curl -X POST)", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "", "", nil, 0},
		{"the agent's own page", "POST", "http://claimd.test:4646/v1/alloc/a/stop", "", "",
			map[string]string{"Origin": "http://claimd.test:4646", "Sec-Fetch-Site": "same-origin"}, 0},
		{"an archive to inspect", "POST", "http://claimd.test:4646/v1/operator/snapshot/inspect", "application/octet-stream", "not an archive", nil, 0},
		{"an archive to restore", "PUT", "http://claimd.test:4646/v1/operator/snapshot", "application/gzip", "not an archive", nil, 0},
		{"a read with any type and origin", "GET", vol, "text/plain", "", map[string]string{"Origin": "https://evil.example"}, 0},
	}
	for _, c := range cases {
		code, eb := serveWithHeaders(s, c.method, c.target, c.ctype, c.header, strings.NewReader(c.body))
		refused := code == http.StatusUnsupportedMediaType || code == http.StatusForbidden
		switch {
		case c.want == 0 && refused:
			t.Errorf("%s: exp: passed to the route got: refused %d %+v", c.name, code, eb)
		case c.want != 0 && code != c.want:
			t.Errorf("%s: exp: refused %d got: %d %+v", c.name, c.want, code, eb)
		case c.want != 0 && !strings.Contains(eb.Error, map[int]string{415: "Content-Type", 403: "Origin"}[c.want]):
			t.Errorf("%s: error exp: names the header got: %+v", c.name, eb)
		}
	}
}

// Every body is bounded by its route's limit before it is read: a body
// announced larger is refused (413) from its length, a chunked one is cut
// at the limit. Small requests (a token, a detach, an expand) take at most
// smallBody, so no caller needs a token to be bounded there; a body over
// smallBody goes only to the routes that take specs or archives, and needs
// a valid token (here the servers cannot be asked, so it is refused).
func TestGuard_BodyLimitsPerRoute(t *testing.T) {
	s := newTestServer(t)
	over := func(n int) string { return `{"name":"` + strings.Repeat("x", n) + `"}` }
	cases := []struct {
		name, method, target string
		length               int64 // announced: 0 the body's own, -1 chunked
		body                 string
		want                 int
		wantMsg              string
	}{
		{"a token request over the small limit", "PUT", "/v1/acl/token", 0, over(smallBody), http.StatusRequestEntityTooLarge, fmt.Sprint(smallBody)},
		{"a chunked expand over the small limit", "PUT", "/v1/volume/v/expand", -1, over(smallBody), http.StatusRequestEntityTooLarge, fmt.Sprint(smallBody)},
		{"a body on a bodyless route", "POST", "/v1/alloc/a/stop", 0, over(smallBody), http.StatusRequestEntityTooLarge, fmt.Sprint(smallBody)},
		{"a spec over 8 MiB", "PUT", "/v1/volume/v", maxBodyBytes + 1, "{}", http.StatusRequestEntityTooLarge, fmt.Sprint(maxBodyBytes)},
		{"an archive over the restore limit", "PUT", "/v1/operator/snapshot", maxRestoreBytes + 1, "x", http.StatusRequestEntityTooLarge, fmt.Sprint(maxRestoreBytes)},
		{"a spec over the small limit, no valid token", "PUT", "/v1/volume/v", 0, over(smallBody), http.StatusForbidden, "token"},
		{"a chunked spec, no valid token", "PUT", "/v1/volumes", -1, "[]", http.StatusForbidden, "token"},
		{"a spec under the small limit", "PUT", "/v1/volume/v", 0, over(100), http.StatusServiceUnavailable, ""},
	}
	for _, c := range cases {
		r := apiRequest(c.method, c.target, strings.NewReader(c.body))
		r.Header.Set("Content-Type", "application/json")
		switch {
		case c.length == -1:
			// Chunked: the length is unknown until the body is read.
			r.ContentLength = -1
			r.Body = io.NopCloser(strings.NewReader(c.body))
		case c.length > 0:
			r.ContentLength = c.length
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var eb errorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		if w.Code != c.want || !strings.Contains(eb.Error, c.wantMsg) {
			t.Errorf("%s: exp: %d naming %q got: %d %+v", c.name, c.want, c.wantMsg, w.Code, eb)
		}
	}
}

// A body must arrive within the body timeout: a peer that stops sending
// midway is cut off. Once the body is read the deadline is gone, so a
// route that answers long after (a volume create, a snapshot restore)
// keeps its connection and its context; and a GET, which has no body, has
// no read deadline at all (a blocking query waits up to 10 minutes).
func TestGuard_BodyDeadlineCutsSlowBodiesNotLongAnswers(t *testing.T) {
	s := newTestServer(t)
	s.bodyTimeout = 300 * time.Millisecond
	long := 3 * s.bodyTimeout
	// A route that reads its body, then takes `long` to answer, and says
	// whether its request's context ended meanwhile (it does when the
	// connection's read fails under a deadline left set).
	answer := func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			if _, err := readBody(w, r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		select {
		case <-r.Context().Done():
			writeJSON(w, http.StatusOK, map[string]string{"context": "ended"})
		case <-time.After(long): // the route's own long work, not a synchronisation
			writeJSON(w, http.StatusOK, map[string]string{"context": "alive"})
		}
	}
	s.Handle("PUT /v1/test/long", http.HandlerFunc(answer))
	s.Handle("GET /v1/test/long", http.HandlerFunc(answer))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, method := range []string{"PUT", "GET"} {
		var body io.Reader
		if method == "PUT" {
			body = strings.NewReader(`{"name":"v"}`)
		}
		req, _ := http.NewRequest(method, s.URL()+"/v1/test/long", body)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s answering after %v exp: an answer got: %v", method, long, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"alive"`) || time.Since(start) < long {
			t.Fatalf("%s answering after %v exp: 200 with its context alive got: %d %s after %v", method, long, resp.StatusCode, b, time.Since(start))
		}
	}

	// A body that stops midway: the agent gives up at the deadline and
	// closes the connection.
	conn, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "PUT /v1/test/long HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\":", s.Addr()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_, err = conn.Read(make([]byte, 1))
	}
	took := time.Since(start)
	if err == nil || took > s.bodyTimeout+5*time.Second {
		t.Fatalf("a body stopped midway exp: the connection closed about %v after the head got: %v after %v", s.bodyTimeout, err, took)
	}
	if resp != nil && resp.StatusCode < 400 {
		t.Fatalf("a body stopped midway exp: an error status or none got: %d", resp.StatusCode)
	}
}
