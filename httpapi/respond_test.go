package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/structs"
)

// newTestServer builds a server whose RPC address answers nothing: enough
// for everything that happens before a call (routing, parameters, bodies).
func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{Addr: "127.0.0.1:0", RPCAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	return s
}

func serve(s *Server, method, target, body string) (*httptest.ResponseRecorder, errorBody) {
	r := apiRequest(method, target, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var eb errorBody
	_ = json.Unmarshal(w.Body.Bytes(), &eb)
	return w, eb
}

// Every route's RPC method is authorized by the caller's token alone: the
// agent's certificate, which carries the call, must never be what lets it
// through (package doc).
func TestRoutes_CallOnlyMethodsAuthorizedByToken(t *testing.T) {
	rules := endpoints.AccessRules()
	for m := range rpcMethods {
		rule, ok := rules[m]
		if !ok {
			t.Errorf("%s exp: an access rule got: none (misspelt?)", m)
			continue
		}
		if rule.Kind == "server" || rule.Kind == "server-cert" {
			t.Errorf("%s exp: a rule decided by the token got: kind %q (the agent's certificate would authorize it)", m, rule.Kind)
		}
	}
}

// docs/http-api.md shows every route.
func TestRoutes_AllDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t)
	if len(s.patterns) < 40 {
		t.Fatalf("routes exp: >= 40 got: %d", len(s.patterns))
	}
	for _, p := range s.patterns {
		method, path, _ := strings.Cut(p, " ")
		if !bytes.Contains(doc, []byte("### "+method+" "+path)) && !bytes.Contains(doc, []byte("### PUT|POST "+path)) {
			t.Errorf("docs/http-api.md exp: a \"### %s\" heading got: none", p)
		}
	}
}

func TestServeHTTP_UnknownRouteAndMethodAreJSON(t *testing.T) {
	s := newTestServer(t)
	w, eb := serve(s, "GET", "/v1/nothing", "")
	if w.Code != 404 || eb.Code != "not_found" || !strings.Contains(eb.Error, "/v1/nothing") {
		t.Fatalf("unknown route exp: 404 not_found naming the path got: %d %+v", w.Code, eb)
	}
	w, eb = serve(s, "PATCH", "/v1/volume/v1", "")
	if w.Code != 405 || eb.Code != "method_not_allowed" || !strings.Contains(w.Header().Get("Allow"), "DELETE") {
		t.Fatalf("wrong method exp: 405 with Allow got: %d %+v %q", w.Code, eb, w.Header().Get("Allow"))
	}
}

func TestQueryParameters(t *testing.T) {
	s := newTestServer(t)
	cases := []struct{ target, field string }{
		{"/v1/volumes?token=abc", "token"},
		{"/v1/volumes?nodes=n1", "nodes"},
		{"/v1/volumes?index=x", "index"},
		{"/v1/volumes?index=-1", "index"},
		{"/v1/volumes?index=5&wait=soon", "wait"},
		{"/v1/volumes?wait=5s", "wait"},
		{"/v1/volumes?stale=maybe", "stale"},
		{"/v1/agent/health?verbose", "verbose"},
	}
	for _, tc := range cases {
		w, eb := serve(s, "GET", tc.target, "")
		if w.Code != 400 || eb.Code != "invalid" || !strings.HasPrefix(eb.Error, tc.field+": ") {
			t.Errorf("%s exp: 400 invalid naming %q got: %d %+v", tc.target, tc.field, w.Code, eb)
		}
	}
	r := httptest.NewRequest("GET", "/v1/volumes?index=7&wait=30s&stale", nil)
	opts, err := queryOptions(r)
	if err != nil || opts.MinQueryIndex != 7 || opts.MaxQueryTime != 30*time.Second || !opts.AllowStale {
		t.Fatalf("query options exp: index 7, wait 30s, stale got: %+v %v", opts, err)
	}
	r = httptest.NewRequest("GET", "/v1/volumes?stale=false", nil)
	if opts, err := queryOptions(r); err != nil || opts.AllowStale {
		t.Fatalf("?stale=false exp: not stale got: %+v %v", opts, err)
	}
}

func TestBodies_ErrorsNameTheProblem(t *testing.T) {
	s := newTestServer(t)
	cases := []struct{ name, target, body, want string }{
		{"empty", "/v1/volumes", "", "body: empty"},
		{"syntax", "/v1/volumes", `{"id": v1}`, "body: invalid JSON at byte"},
		{"truncated", "/v1/volume/v1", `{"id": "v1"`, "body: truncated JSON"},
		{"unknown field", "/v1/volumes", `{"id":"v1","externalid":"e"}`, `body: unknown field "externalid"`},
		{"unknown field in array", "/v1/volumes", `[{"id":"v1","plugin":"p"}]`, `body: unknown field "plugin"`},
		{"wrong type", "/v1/volume/v1", `{"access_mode": 5}`, "access_mode: a JSON number where a string is expected"},
		{"nested wrong type", "/v1/volume/v1", `{"mount_options": {"mount_flags": "ro"}}`, "mount_options.mount_flags: a JSON string where an array is expected"},
		{"two values", "/v1/volume/v1", `{"id":"v1"} {"id":"v2"}`, "body: more than one JSON value"},
		{"id mismatch", "/v1/volume/v1", `{"id":"v2"}`, `id: "v2" in the body is not "v1" of the URL`},
		{"policy name mismatch", "/v1/acl/policy/p1", `{"name":"p2","rules":""}`, `name: "p2" in the body is not "p1" of the URL`},
		{"ttl", "/v1/acl/token", `{"name":"n","ttl":"a week"}`, `ttl: "a week" is not a duration`},
		{"alloc unknown field", "/v1/allocs", `{"id":"a1","node":"n1"}`, `body: unknown field "node"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, eb := serve(s, "PUT", tc.target, tc.body)
			if w.Code != 400 || eb.Code != "invalid" || !strings.HasPrefix(eb.Error, tc.want) {
				t.Fatalf("exp: 400 invalid %q got: %d %+v", tc.want, w.Code, eb)
			}
		})
	}
	big := `{"id":"v1","name":"` + strings.Repeat("x", maxBodyBytes) + `"}`
	w, eb := serve(s, "PUT", "/v1/volume/v1", big)
	if w.Code != 413 || eb.Code != "too_large" {
		t.Fatalf("body over %d bytes exp: 413 too_large got: %d %+v", maxBodyBytes, w.Code, eb)
	}
}

func TestStatusOf_MapsEveryCode(t *testing.T) {
	cases := map[structs.ErrorCode]int{
		structs.CodeInvalid: 400, structs.CodePermissionDenied: 403, structs.CodeNotFound: 404,
		structs.CodeConflict: 409, structs.CodeMaxClaims: 409, structs.CodeUnschedulable: 409,
		structs.CodeTooLarge: 413, structs.CodeNoLeader: 503, structs.CodeUnavailable: 503,
		structs.CodeTimeout: 503, structs.CodeShutdown: 503,
	}
	for code, want := range cases {
		// As the api client returns them: parsed from the wire, wrapped.
		err := fmt.Errorf("call: %w", structs.NewError(code, "something"))
		status, gotCode, msg := statusOf(err)
		if status != want || gotCode != string(code) || msg != "something" {
			t.Errorf("%s exp: %d %s %q got: %d %s %q", code, want, code, "something", status, gotCode, msg)
		}
	}
	if status, code, _ := statusOf(errors.New("boom")); status != 500 || code != "internal" {
		t.Errorf("uncoded error exp: 500 internal got: %d %s", status, code)
	}
}

// An RPC that cannot reach a server is 503, worth retrying.
func TestUnreachableServerIs503(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0", RPCAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	w, eb := serve(s, "GET", "/v1/volumes", "")
	if w.Code != http.StatusServiceUnavailable || eb.Code != "unavailable" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("exp: 503 unavailable with Retry-After got: %d %+v %v", w.Code, eb, w.Header())
	}
}
