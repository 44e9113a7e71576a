// Package uitest drives the web UI (package ui) in a real headless
// chromium against a real secured cluster: TLS with a client certificate,
// ACL tokens, CSI plugins on unix sockets. Its own package, so that the
// browser tests run apart from the other integration tests and a local run
// without chromium skips only them (CI sets CLAIMD_BROWSER_REQUIRED=1 and
// fails instead).
//
// go test ./integration/ui -run TestUI -update-screenshots rewrites the
// screenshots in docs/ui/.
package uitest
