package uitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/tlsutil"
)

// browserRequired is set by .ci/run: there a missing chromium (or NSS
// tool) fails the test instead of skipping it.
const browserRequired = "CLAIMD_BROWSER_REQUIRED"

// chromiumPath is Debian's chromium (apt-get install chromium).
const chromiumPath = "/usr/bin/chromium"

// needTools skips (locally) or fails (CI) when the browser or the tools
// that give it the test's certificates are missing.
func needTools(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(chromiumPath); err != nil {
		missing = append(missing, chromiumPath)
	}
	for _, tool := range []string{"certutil", "pk12util", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("browser test needs %s (apt-get install chromium libnss3-tools openssl)", strings.Join(missing, ", "))
	if os.Getenv(browserRequired) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// newBrowser starts a headless chromium that trusts the cluster's CA and
// presents the PKI's cli certificate to origin, as an operator's browser
// would after importing them: the agent's HTTPS requires a client
// certificate. Nothing is switched off: no --ignore-certificate-errors.
//
// Chromium on Linux keeps certificates in an NSS database under $HOME, so
// the browser runs with a fresh HOME holding one; the profile's
// auto_select_certificate setting picks the client certificate for origin
// without the dialog a headless browser cannot show.
func newBrowser(t *testing.T, pki *harness.PKI, origin string) context.Context {
	t.Helper()
	needTools(t)
	home := t.TempDir()
	nssdb := "sql:" + filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(filepath.Join(home, ".pki", "nssdb"), 0o700); err != nil {
		t.Fatal(err)
	}
	p12 := filepath.Join(home, "cli.p12")
	run(t, "certutil", "-N", "-d", nssdb, "--empty-password")
	run(t, "certutil", "-A", "-d", nssdb, "-n", "claimd-test-ca", "-t", "C,,", "-i", pki.CAFile)
	run(t, "openssl", "pkcs12", "-export", "-in", pki.CertFile[tlsutil.RoleCLI], "-inkey", pki.KeyFile[tlsutil.RoleCLI],
		"-out", p12, "-passout", "pass:")
	run(t, "pk12util", "-i", p12, "-d", nssdb, "-W", "")

	profile := filepath.Join(home, "profile")
	prefs := map[string]any{"profile": map[string]any{"content_settings": map[string]any{"exceptions": map[string]any{
		"auto_select_certificate": map[string]any{origin + ",*": map[string]any{"setting": map[string]any{"filters": []any{map[string]any{}}}}},
	}}}}
	data, _ := json.Marshal(prefs)
	if err := os.MkdirAll(filepath.Join(profile, "Default"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profile, "Default", "Preferences"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(profile),
		chromedp.Env("HOME=" + home),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// do runs browser actions with a deadline.
func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitPage polls a JavaScript expression until it returns "" (the
// condition holds) or the deadline passes; a non-empty string says what
// is still missing and is the failure message.
func waitPage(t *testing.T, ctx context.Context, timeout time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		var err error
		last, err = chromedp.Run(c, chromedp.Evaluate[string](expr))
		cancel()
		if err == nil && last == "" {
			return
		}
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, last)
		}
		// Each evaluation is a round trip to the browser: this loop is
		// bounded by the deadline and paced by those round trips and a
		// short pause, not a busy spin.
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
