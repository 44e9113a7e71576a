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

	"github.com/claimd/claimd/structs"
)

// What every request passes before its route runs (guard): the checks that
// bound what an unauthenticated peer can make the agent hold, and the one
// that keeps a browser page on another site from changing anything.

const (
	// bodyReadTimeout bounds the read of a request's body, from the end of
	// its head: a peer that trickles a body is cut off, and the memory it
	// held is freed. 8 MiB at 1 MiB/s fits with room.
	bodyReadTimeout = 30 * time.Second
	// snapshotBodyTimeout is the same for a snapshot restore or inspect,
	// whose archive may be hundreds of megabytes.
	snapshotBodyTimeout = 10 * time.Minute
	// smallBody is what any caller may send before its token is known to
	// be valid: every JSON spec an operator writes by hand is far below.
	// A larger body (a batch registration, a snapshot) is read only for a
	// token the servers know.
	smallBody = 64 << 10
	// maxLargeBodies is how many bodies over smallBody are read at once;
	// past it a request is refused at once (503), not queued, so the
	// memory large bodies hold is at most maxLargeBodies * maxBodyBytes
	// (or the snapshot limit for a restore).
	maxLargeBodies = 4
)

// browserSimpleTypes are the content types a page on another site can
// send without the browser asking first (a form, or a "simple" fetch):
// a state-changing route refuses them. JSON (and an archive as
// application/octet-stream) need a CORS preflight, which this API never
// grants.
var browserSimpleTypes = map[string]bool{
	"application/x-www-form-urlencoded": true,
	"multipart/form-data":               true,
	"text/plain":                        true,
}

// stateChanging: the methods a route that changes something answers.
func stateChanging(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return true
	}
	return false
}

// guard runs before every route. It answers the request itself (and
// returns false) when the request is refused.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	release = func() {}
	if stateChanging(r.Method) {
		if origin := r.Header.Get("Origin"); origin != "" && origin != s.ownOrigin(r) {
			writeJSONError(w, http.StatusForbidden, "permission_denied",
				fmt.Sprintf("Origin %q is not this agent's (%s): state-changing requests from other sites are refused", origin, s.ownOrigin(r)))
			return release, false
		}
		if ct := r.Header.Get("Content-Type"); ct != "" || hasBody(r) {
			mt, _, _ := mime.ParseMediaType(ct)
			if mt == "" || browserSimpleTypes[strings.ToLower(mt)] {
				writeJSONError(w, http.StatusUnsupportedMediaType, "invalid",
					fmt.Sprintf("Content-Type %q: send the body as application/json (a snapshot as application/octet-stream)", ct))
				return release, false
			}
		}
	}
	if !hasBody(r) {
		return release, true
	}
	snapshotRoute := strings.HasPrefix(r.URL.Path, "/v1/operator/snapshot")
	if !snapshotRoute && r.ContentLength > maxBodyBytes {
		// Refused from its announced length, before a byte is read.
		writeJSONError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body: larger than %d bytes", maxBodyBytes))
		return release, false
	}
	// The body is read within bodyReadTimeout; once it is read, the
	// connection has no read deadline again (a long call, such as a
	// volume create, must not be cut by it).
	timeout := bodyReadTimeout
	if snapshotRoute {
		timeout = snapshotBodyTimeout
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
	}
	if r.ContentLength >= 0 && r.ContentLength <= smallBody {
		return release, true
	}
	// A large (or chunked, so unknown) body: the token first, then a slot.
	if err := s.checkToken(r.Context(), r.Header.Get(TokenHeader)); err != nil {
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

// ownOrigin is this agent's origin as the browser names it.
func (s *Server) ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// checkToken asks the servers whether token is a valid ACL token. With
// ACLs off there is nothing to check.
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
	if errors.Is(err, structs.ErrPermissionDenied) {
		return errors.New("the token is not valid")
	}
	return err
}

// deadlineBody clears the body's read deadline once the body is read.
type deadlineBody struct {
	io.ReadCloser
	clear func()
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		b.clear()
	}
	return n, err
}
