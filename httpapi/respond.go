package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/structs"
)

// Headers of the API.
const (
	// TokenHeader carries the caller's ACL token (its secret ID). Only the
	// header: a token in a URL ends up in proxies' and shells' logs.
	TokenHeader = "X-Claimd-Token"
	// IndexHeader is the Raft index of what a read returned (pass it as
	// ?index= to wait for the next change) or at which a write committed.
	IndexHeader = "X-Claimd-Index"
	// KnownLeaderHeader and LastContactHeader (milliseconds) say how
	// fresh a read is, for ?stale reads from a follower.
	KnownLeaderHeader = "X-Claimd-KnownLeader"
	LastContactHeader = "X-Claimd-LastContact"
)

// maxBodyBytes bounds a request body. The RPC layer refuses requests over
// rpc.MaxRequestBytes (the same 8 MiB) anyway; refusing here first means a
// bigger body is never read into memory.
const maxBodyBytes = 8 << 20

// endpoint is a route's handler: it returns the value sent as JSON with
// 200, or an error sent as {"error", "code"} with the status of its code.
type endpoint func(w http.ResponseWriter, r *http.Request) (any, error)

// readParams are the query parameters every read takes.
var readParams = []string{"index", "wait", "stale"}

// wrap checks the route's query parameters and answers with the
// endpoint's result.
func (s *Server) wrap(params []string, fn endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkParams(r, params); err != nil {
			s.writeError(w, r, err)
			return
		}
		out, err := fn(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if ws, ok := out.(withStatus); ok {
			writeJSON(w, ws.status, ws.body)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// requestToken is the caller's ACL token: the X-Claimd-Token header, or
// the standard `Authorization: Bearer` (what Prometheus, curl's
// --oauth2-bearer and most HTTP tooling send). When both are given they
// must agree: two different tokens in one request is a mistake to refuse,
// not to settle by picking one.
func requestToken(r *http.Request) (string, error) {
	token := r.Header.Get(TokenHeader)
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return token, nil
	}
	scheme, bearer, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(bearer) == "" {
		return "", structs.Invalid("Authorization", "only the Bearer scheme is accepted (Authorization: Bearer <token>)")
	}
	bearer = strings.TrimSpace(bearer)
	if token != "" && token != bearer {
		return "", structs.Invalid("Authorization", "the request has two different tokens ("+TokenHeader+" and Authorization: Bearer)")
	}
	return bearer, nil
}

// withStatus is an endpoint's answer with a status other than 200 (an
// unhealthy agent's 503 carries the health report, not an error).
type withStatus struct {
	status int
	body   any
}

// checkParams refuses a query parameter the route does not take, so that a
// typo (?nodes=) is an error rather than a filter silently not applied.
func checkParams(r *http.Request, allowed []string) error {
	for k := range r.URL.Query() {
		if k == "token" {
			return structs.Invalid("token", "the token goes in the "+TokenHeader+" header, never in the URL (URLs end up in logs)")
		}
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return structs.Invalid(k, "unknown query parameter (this route takes none)")
			}
			return structs.Invalid(k, fmt.Sprintf("unknown query parameter (this route takes: %s)", strings.Join(allowed, ", ")))
		}
	}
	return nil
}

// queryOptions reads ?index, ?wait and ?stale into a read's options.
func queryOptions(r *http.Request) (structs.QueryOptions, error) {
	q := r.URL.Query()
	var opts structs.QueryOptions
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return opts, structs.Invalid("index", fmt.Sprintf("%q is not a Raft index (an unsigned integer)", v))
		}
		opts.MinQueryIndex = n
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return opts, structs.Invalid("wait", fmt.Sprintf("%q is not a positive duration such as 30s or 5m", v))
		}
		if opts.MinQueryIndex == 0 {
			return opts, structs.Invalid("wait", "only with index: a blocking query waits for the state to pass index")
		}
		opts.MaxQueryTime = d
	}
	stale, err := flagParam(r, "stale")
	opts.AllowStale = stale
	return opts, err
}

// flagParam reads a boolean parameter: present without a value (?force)
// is true, as are true and 1; false and 0 are false.
func flagParam(r *http.Request, name string) (bool, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return false, nil
	}
	v := q.Get(name)
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, structs.Invalid(name, fmt.Sprintf("%q is not true or false", v))
	}
	return b, nil
}

// setQueryMeta answers a read with its index and freshness.
func setQueryMeta(w http.ResponseWriter, meta structs.QueryMeta) {
	h := w.Header()
	h.Set(IndexHeader, strconv.FormatUint(meta.Index, 10))
	h.Set(KnownLeaderHeader, strconv.FormatBool(meta.KnownLeader))
	h.Set(LastContactHeader, strconv.FormatInt(meta.LastContact.Milliseconds(), 10))
}

// setWriteIndex answers a write with the index it committed at.
func setWriteIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(IndexHeader, strconv.FormatUint(index, 10))
}

// writeResult is the body of a write that returns nothing else.
type writeResult struct {
	Index uint64 `json:"index"`
}

// decodeBody reads a JSON body strictly: bounded, one value, no unknown
// field; errors name the field or the byte offset.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(data, v)
}

// readBody reads a body of at most maxBodyBytes (and the route's limit,
// which guard set), without leading or trailing space.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// Read into a buffer of the announced size (bounded): growing by
	// doubling would hold up to twice the body while it is read.
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= maxBodyBytes {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	data := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			// The route's limit (guard.go) or maxBodyBytes, whichever cut it.
			return nil, structs.NewError(structs.CodeTooLarge, fmt.Sprintf("body: larger than %d bytes (this route's limit)", mbe.Limit))
		}
		return nil, structs.Invalid("body", err.Error())
	}
	return bytes.TrimSpace(data), nil
}

func decodeJSON(data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return structs.Invalid("body", "empty: a JSON document is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return structs.Invalid("body", "more than one JSON value (send one document; a list goes in an array)")
	}
	return nil
}

// jsonError turns a decoding error into an invalid error naming the field
// (or the byte) and the problem.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return structs.Invalid("body", fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error()))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		return structs.Invalid(field, fmt.Sprintf("a JSON %s where %s is expected", te.Value, jsonKind(te.Type)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return structs.Invalid("body", "truncated JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return structs.Invalid("body", "unknown field "+name)
	}
	return structs.Invalid("body", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names what JSON a Go type takes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// errorBody is every error's JSON.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// statusOf maps an error's code to the HTTP status. Errors without a code
// are the servers' or this agent's own failures: 500.
func statusOf(err error) (int, string, string) {
	var ce *structs.CodedError
	if !errors.As(err, &ce) {
		return http.StatusInternalServerError, "internal", err.Error()
	}
	status := http.StatusInternalServerError
	switch ce.Code {
	case structs.CodeInvalid:
		status = http.StatusBadRequest
	case structs.CodePermissionDenied:
		status = http.StatusForbidden
	case structs.CodeNotFound:
		status = http.StatusNotFound
	case structs.CodeConflict, structs.CodeMaxClaims, structs.CodeUnschedulable:
		// The request is right but the state refuses it now.
		status = http.StatusConflict
	case structs.CodeTooLarge:
		status = http.StatusRequestEntityTooLarge
	case structs.CodeNoLeader, structs.CodeUnavailable, structs.CodeTimeout, structs.CodeShutdown:
		status = http.StatusServiceUnavailable
	}
	return status, string(ce.Code), ce.Message
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := statusOf(err)
	if status == http.StatusServiceUnavailable {
		// Worth retrying: an election, a restarting server.
		w.Header().Set("Retry-After", "1")
	}
	switch {
	case status >= 500 && r.Context().Err() != nil:
		// The caller went away (a closed browser tab, a CLI timeout):
		// nothing failed that an operator must look at.
		s.logger.Debug("HTTP caller went away", "method", r.Method, "path", r.URL.Path, "error", err)
	case status >= 500:
		// Never the token: it is in a header this line does not print.
		s.logger.Warn("HTTP request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	}
	writeJSONError(w, status, code, msg)
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// writeJSON writes v indented like the CLI's -json output, without
// HTML escaping ("<redacted>" stays readable).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(errorBody{Error: "encode response: " + err.Error(), Code: "internal"})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
