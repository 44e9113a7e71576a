package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/claimd/claimd/snapshot"
	"github.com/claimd/claimd/structs"
)

// What every request passes before its route runs (guard): the checks that
// bound what an unauthenticated peer can make the agent hold, and the ones
// that keep a browser page on another site from changing anything.

const (
	// headerReadTimeout bounds the TLS handshake and the request head
	// (http.Server.ReadHeaderTimeout).
	headerReadTimeout = 10 * time.Second
	// bodyReadTimeout bounds the read of a request's body, from the end of
	// its head: a peer that trickles a body is cut off, and the memory it
	// held is freed. 8 MiB at 1 MiB/s fits with room.
	bodyReadTimeout = 30 * time.Second
	// snapshotBodyTimeout is the same for a snapshot restore or inspect,
	// whose archive may be hundreds of megabytes.
	snapshotBodyTimeout = 10 * time.Minute
	// smallBody is what any caller may send before its token is known to
	// be valid, and all that a route taking a short request (a token, a
	// detach, an expand) takes: every JSON spec an operator writes by hand
	// is far below. A larger body goes only to the routes in bodyLimits,
	// and is read only for a token the servers know.
	smallBody = 64 << 10
	// maxLargeBodies is how many bodies over smallBody are read at once;
	// past it a request is refused at once (503), not queued, so the
	// memory large bodies hold is at most maxLargeBodies * maxBodyBytes
	// (archives are streamed, never held).
	maxLargeBodies = 4
	// maxRestoreBytes bounds a snapshot archive sent to be restored: it
	// is streamed to the servers, which spool it to disk, so the bound is
	// what the servers accept (a state of at most snapshot.MaxStateBytes,
	// gzip'd; a little more for the tar and metadata around it).
	maxRestoreBytes = snapshot.MaxStateBytes + 1<<20
)

// bodyLimits are the routes that take more than smallBody, by path (PUT
// and POST alike). Every other route, including those other packages add
// with Handle, takes at most smallBody.
var bodyLimits = map[string]int64{
	"/v1/volumes":                   maxBodyBytes, // a batch of volume specs
	"/v1/volume/{id}":               maxBodyBytes, // a spec with parameters, contexts, secrets
	"/v1/volume/{id}/create":        maxBodyBytes,
	"/v1/allocs":                    maxBodyBytes,
	"/v1/acl/policy/{name}":         maxBodyBytes, // rules for many volumes
	"/v1/operator/snapshot":         maxRestoreBytes,
	"/v1/operator/snapshot/inspect": maxInspectBytes,
}

// archiveRoutes take a snapshot archive, sent as application/octet-stream
// or application/gzip, or application/json as the docs' ccurl sends
// everything (all three need a CORS preflight from another site).
var archiveRoutes = map[string]bool{"/v1/operator/snapshot": true, "/v1/operator/snapshot/inspect": true}

// bodyTypeAllowed: the only bodies a state-changing route takes are JSON
// (and archives on the archive routes). An allow list, not a deny list of
// what a form or a "simple" cross-origin fetch can send
// (application/x-www-form-urlencoded, multipart/form-data, text/plain):
// what the browser and this parser make of an odd header cannot differ in
// the attacker's favour.
func bodyTypeAllowed(ctype, path string) bool {
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil {
		return false
	}
	switch mt {
	case "application/json":
		return true
	case "application/octet-stream", "application/gzip":
		return archiveRoutes[path]
	}
	return false
}

// stateChanging: the methods a route that changes something answers.
func stateChanging(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return true
	}
	return false
}

// routePath is a ServeMux pattern's path ("PUT /v1/volume/{id}" ->
// "/v1/volume/{id}").
func routePath(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return pattern
}

// limitBodyRead gives a request's body bodyTimeout (or the snapshot
// timeout) to arrive, from now. It runs for every request with a body,
// before anything may refuse it: net/http reads up to 256 KiB of a
// refused request's body before it answers, and that read must not wait
// for a peer that trickles.
func (s *Server) limitBodyRead(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) {
		return
	}
	timeout := s.bodyTimeout
	if strings.HasPrefix(r.URL.Path, "/v1/operator/snapshot") {
		timeout = snapshotBodyTimeout
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
	}
}

// guard runs before the route of pattern. It answers the request itself
// (and returns false) when the request is refused; release frees what it
// took (a large-body slot) once the route is done.
func (s *Server) guard(w http.ResponseWriter, r *http.Request, pattern string) (release func(), ok bool) {
	release = func() {}
	path := routePath(pattern)
	if stateChanging(r.Method) {
		// The browser says where a request comes from (Sec-Fetch-Site, or
		// Origin for older ones); the standard library's check refuses any
		// origin but this agent's own. Requests without either header
		// (curl, the CLI, scripts) are not a browser's and pass.
		if err := s.crossOrigin.Check(r); err != nil {
			writeJSONError(w, http.StatusForbidden, "permission_denied",
				fmt.Sprintf("Origin %q (Sec-Fetch-Site %q) is not this agent's own origin: state-changing requests from other sites are refused",
					r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")))
			return release, false
		}
		// A request without a body and without a type is what curl -X
		// POST sends and what no cross-site form can (a form always names
		// its type); anything else must be JSON.
		if ct := r.Header.Get("Content-Type"); ct != "" || hasBody(r) {
			if !bodyTypeAllowed(ct, path) {
				want := "application/json"
				if archiveRoutes[path] {
					want = "application/octet-stream (or application/json)"
				}
				writeJSONError(w, http.StatusUnsupportedMediaType, "invalid",
					fmt.Sprintf("Content-Type %q: send the body as %s; forms, multipart and text/plain, which a page on another site can send, are refused", ct, want))
				return release, false
			}
		}
	}
	if !hasBody(r) {
		return release, true
	}
	limit := int64(smallBody)
	if l, ok := bodyLimits[path]; ok {
		limit = l
	}
	if r.ContentLength > limit {
		// Refused from its announced length, before a byte is read.
		writeJSONError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body: larger than %d bytes (this route's limit)", limit))
		return release, false
	}
	// A chunked body (or one longer than it said) is cut at the limit.
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if limit <= smallBody || (r.ContentLength >= 0 && r.ContentLength <= smallBody) {
		return release, true
	}
	// A large (or chunked, so unknown) body: the token first, then a slot.
	token, err := requestToken(r)
	if err == nil {
		err = s.checkToken(r.Context(), token)
	}
	if err != nil {
		writeJSONError(w, http.StatusForbidden, "permission_denied",
			fmt.Sprintf("a request body over %d bytes needs a valid ACL token (%s): %v", smallBody, TokenHeader, err))
		return release, false
	}
	select {
	case s.largeBodies <- struct{}{}:
		return func() { <-s.largeBodies }, true
	default:
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, http.StatusServiceUnavailable, "unavailable",
			fmt.Sprintf("too many large request bodies in progress (at most %d at once); retry", maxLargeBodies))
		return release, false
	}
}

// hasBody: the request announces a body (a length, or chunks).
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// checkToken asks the servers whether token is a valid ACL token. With
// ACLs off there is nothing to check. The error never holds the token.
func (s *Server) checkToken(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var reply structs.ACLTokenReadResponse
	err := s.api.Call(ctx, "ACL.TokenSelf", &structs.GenericRequest{QueryOptions: structs.QueryOptions{AuthToken: token}}, &reply)
	if err == nil || (errors.Is(err, structs.ErrInvalid) && strings.Contains(err.Error(), "ACLs are not enabled")) {
		return nil
	}
	if token == "" {
		return errors.New("no token given")
	}
	if errors.Is(err, structs.ErrPermissionDenied) || errors.Is(err, structs.ErrNotFound) {
		return errors.New("the token is not valid")
	}
	return err
}

// deadlineBody clears the body's read deadline once the body has been
// read whole: the deadline is for the body, and nothing read after it (a
// route answering long after, such as a volume create or a restore, while
// net/http watches the connection for the peer going away) may be cut by
// it. net/http happens to clear it too when it starts that watch; this
// does not depend on it. On any other error (the deadline itself, a body
// over its limit) the deadline stays: net/http may read on to discard the
// rest before it answers, and that read must fail at once, not wait for
// a peer that trickles.
type deadlineBody struct {
	io.ReadCloser
	clear func()
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.clear()
	}
	return n, err
}
