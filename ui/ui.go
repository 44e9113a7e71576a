// Package ui is the agent's web UI: static HTML, CSS and JavaScript
// embedded in the binary and served under /ui/ by the HTTP API server.
//
// The pages are plain files with no build step (docs/decisions.md): the
// browser runs them as written, and they read the cluster only through the
// public HTTP API, with the token the user types in (kept in the tab's
// session storage). So the UI can show nothing and do nothing that the
// same token could not with curl: every check stays on the servers.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Prefix is the URL path the UI is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy allows the page's own scripts, styles and API
// calls and nothing else: no other origin, no inline script, no framing.
// The files never fetch from elsewhere (no CDN, no web font), and a
// script injected through data the page shows could not run or send it
// anywhere.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the embedded files under Prefix, with the security
// headers on every answer.
func Handler() http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	fileServer := http.StripPrefix(Prefix, http.FileServer(http.FS(static)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// The files change only with the binary; revalidate so an upgrade
		// is picked up at the next load.
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
