package uitest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/claimd/claimd/api"
	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/httpapi"
	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
	"github.com/claimd/claimd/version"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the pages' screenshots to docs/ui/")

// volumeSecret must never reach the page.
const volumeSecret = "ui-test-secret-value"

// uiEnv is one secured server with a client agent (a node plugin that the
// test stops and starts) and a controller, and the HTTP API the browser
// talks to, as `agent -dev` runs them.
type uiEnv struct {
	c      *harness.Cluster
	srv    *harness.TestServer
	api    *api.Client
	node   *harness.TestPlugin
	worker *harness.TestClient
	http   *httpapi.Server
	addr   string
}

func newUIEnv(t *testing.T) *uiEnv {
	t.Helper()
	return newUIEnvOpts(t, harness.Options{})
}

// newUIEnvOpts is newUIEnv on a cluster made with opts.
func newUIEnvOpts(t *testing.T, opts harness.Options) *uiEnv {
	t.Helper()
	c := harness.NewCluster(t, 1, opts)
	c.StartAll()
	srv := c.WaitForLeader(30 * time.Second)
	e := &uiEnv{c: c, srv: srv, api: srv.Client(), addr: harness.FreeAddr(t)}
	root := filepath.Join(t.TempDir(), "storage")
	e.node = harness.StartPlugin(t, "w1", hostdir.ModeNode, root)
	e.worker = c.StartClient("w1", []string{srv.Addr}, e.node.Config())
	ctrl := harness.StartPlugin(t, "ctrl", hostdir.ModeController, root)
	c.StartClient("ctrl", []string{srv.Addr}, ctrl.Config()).AdmitControllers()
	harness.WaitFor(t, 30*time.Second, func() error {
		p, _, err := e.api.Plugin(harness.Ctx(t, 10*time.Second), "hostdir", structs.QueryOptions{})
		if err != nil {
			return err
		}
		if p.NodesHealthy != 1 || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin exp: 1 healthy node and controller got: %+v", p)
		}
		return nil
	})
	e.startHTTP(t)
	return e
}

// startHTTP (re)starts the agent's HTTP API on the same address.
func (e *uiEnv) startHTTP(t *testing.T) {
	t.Helper()
	h, err := httpapi.New(httpapi.Config{
		Addr: e.addr, TLS: e.c.PKI().Configurator(t, tlsutil.RoleServer), RPCAddrs: []string{e.srv.Addr},
		Dialer: e.c.Net.Dialer(e.srv.Name), Server: e.srv.Server(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The port was just freed by the previous server: retry briefly.
	harness.WaitFor(t, 10*time.Second, h.Start)
	e.http = h
	t.Cleanup(func() { h.Shutdown() })
}

func (e *uiEnv) register(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		v := &structs.Volume{ID: id, Name: "vol " + id, ExternalID: "ext-" + id, PluginID: "hostdir",
			AccessMode: structs.AccessModeSingleNodeWriter, AttachmentMode: structs.AttachmentModeFilesystem,
			Secrets: structs.Secrets{"password": volumeSecret}}
		if _, err := e.api.RegisterVolumes(harness.Ctx(t, 30*time.Second), v); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *uiEnv) runAlloc(t *testing.T, id, vol string) {
	t.Helper()
	a := &structs.Alloc{ID: id, NodeID: e.worker.NodeID(), Volumes: []*structs.AllocVolumeRequest{{VolumeID: vol}}}
	if _, err := e.api.PlaceAllocs(harness.Ctx(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, id, structs.AllocClientRunning)
}

func (e *uiEnv) waitAlloc(t *testing.T, id string, want structs.AllocClientStatus) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, func() error {
		a, _, err := e.api.Alloc(harness.Ctx(t, 10*time.Second), id, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if a.ClientStatus != want {
			return fmt.Errorf("alloc %s exp: %s got: %s (%s)", id, want, a.ClientStatus, a.ClientDescription)
		}
		return nil
	})
}

// readOnlyToken is a token that may read everything the UI shows and
// change nothing.
func (e *uiEnv) readOnlyToken(t *testing.T) string {
	t.Helper()
	ctx := harness.Ctx(t, 30*time.Second)
	rules := `volume { policy = "read" }
node { policy = "read" }
plugin { policy = "read" }
alloc { policy = "read" }
operator { policy = "read" }`
	if _, err := e.api.ACLPolicyApply(ctx, "ui-read", "read-only UI user", rules); err != nil {
		t.Fatal(err)
	}
	tok, err := e.api.ACLTokenCreate(ctx, "ui-reader", structs.ACLTokenClient, []string{"ui-read"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

// useToken types a token into the page's token form, as a user does.
func useToken(t *testing.T, ctx context.Context, secret string) {
	t.Helper()
	do(t, ctx, chromedp.SetValue(chromedp.CSS("#token-input"), secret), chromedp.Click(chromedp.CSS("#token-form button[type=submit]")))
}

// shot saves the page as docs/ui/name.png when -update-screenshots is set.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*updateScreenshots {
		return
	}
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "ui", name+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The scenario: allocs stop while their node plugin is down; the
// volumes page lists the stuck release first with its attempts and error,
// updates by itself when the plugin returns and the claim is freed, shows
// the release timeline, refuses a read-only token's detach with the
// capability named, and survives the agent going away.
func TestUI_StuckReleaseLiveUpdatesAndReadOnlyDetach(t *testing.T) {
	needTools(t)
	// w1's own unmount at web-zulu's stop can only fail (its plugin is
	// gone): 2 s for it, not the agent's default 10 s, which this test
	// only waited out before its release could fail on the servers' side.
	e := newUIEnvOpts(t, harness.Options{ConfigureClient: func(cfg *client.Config) { cfg.OwnDetachTimeout = 2 * time.Second }})
	// "zulu" sorts last by ID: listing it first must come from its stuck
	// release, not from the order of IDs.
	e.register(t, "alpha", "bravo", "zulu")
	e.runAlloc(t, "web-bravo", "bravo")
	e.runAlloc(t, "web-zulu", "zulu")

	// The node plugin goes away; then web-zulu stops: its release cannot
	// node-detach and is retried.
	e.node.Stop()
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "web-zulu"); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		st, err := e.api.ReleaseStatus(harness.Ctx(t, 10*time.Second))
		if err != nil {
			return err
		}
		if st["zulu"].Attempts < 2 {
			return fmt.Errorf("zulu release attempts exp: >= 2 got: %+v", st["zulu"])
		}
		return nil
	})

	ctx := newBrowser(t, e.c.PKI(), e.http.URL())
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/"))
	// "/" redirects to the UI; the volumes page is the default.
	waitPage(t, ctx, 30*time.Second, "UI loaded from /", `location.pathname === "/ui/" && document.querySelector("#token-form") ? "" : "at " + location.href`)
	useToken(t, ctx, e.c.ManagementToken())
	waitPage(t, ctx, 60*time.Second, "stuck release listed first with attempts and error", `(() => {
		const rows = [...document.querySelectorAll("#volumes tbody tr")];
		if (rows.length !== 3) return "rows: " + rows.length + " " + document.querySelector("main").innerText;
		const first = rows[0];
		if (first.dataset.volume !== "zulu") return "first row: " + first.dataset.volume;
		if (first.dataset.state !== "failing") return "zulu state: " + first.dataset.state;
		const attempts = Number(first.querySelector(".attempts").textContent);
		if (!(attempts >= 1)) return "attempts: " + first.querySelector(".attempts").textContent;
		const err = first.querySelector(".last-error").textContent;
		if (!err || err === "—") return "last error: " + err;
		if (first.querySelector(".next-try time") === null) return "no next try";
		return "";
	})()`)
	html := eval[string](t, ctx, `document.documentElement.outerHTML`)
	if strings.Contains(html, volumeSecret) {
		t.Fatalf("volumes page exp: no volume secret got: %q in the page", volumeSecret)
	}
	shot(t, ctx, "volumes")
	if *updateScreenshots {
		// The same page on a phone-sized screen.
		do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		shot(t, ctx, "volumes-phone")
		do(t, ctx, chromedp.EmulateReset(), chromedp.EmulateViewport(1280, 900))
	}
	// A marker on the page's window: it survives only if the page is
	// never reloaded, so its presence later proves the update came live.
	eval[string](t, ctx, `window.liveMarker = "set"; "ok"`)

	// A second tab (its own session storage: the token is entered again)
	// shows the volume's page: the stuck claim with its timeline so far.
	detail, closeDetail := chromedp.NewContext(ctx)
	defer closeDetail()
	// The tab lives as long as the context of its first run: no deadline.
	if err := chromedp.Do(detail); err != nil {
		t.Fatal(err)
	}
	do(t, detail, chromedp.Navigate(e.http.URL()+"/ui/#/volume/zulu"))
	useToken(t, detail, e.c.ManagementToken())
	waitPage(t, detail, 30*time.Second, "zulu detail with its release timeline", `(() => {
		const row = document.querySelector('tr[data-claim="web-zulu"]');
		if (!row) return "no claim row: " + document.querySelector("main").innerText;
		const steps = [...row.querySelectorAll("li[data-step]")].map((li) => li.dataset.step).join(",");
		if (steps !== "taken,unpublishing") return "steps: " + steps;
		if (!document.querySelector(".stuck .last-error")) return "no release failure shown";
		return "";
	})()`)
	html = eval[string](t, detail, `document.documentElement.outerHTML`)
	if strings.Contains(html, volumeSecret) {
		t.Fatalf("volume page exp: no volume secret got: %q in the page", volumeSecret)
	}
	shot(t, detail, "volume")
	eval[string](t, detail, `window.liveMarker = "set"; "ok"`)

	// The plugin comes back: the release finishes. Both pages show it by
	// themselves, through blocking queries (requests with index and wait),
	// without a reload: the list has zulu free, the volume's page the
	// freed claim's full timeline.
	e.node.Start()
	waitPage(t, ctx, 90*time.Second, "zulu freed, shown live on the volumes page", `(() => {
		if (window.liveMarker !== "set") return "the page was reloaded";
		const row = document.querySelector('#volumes tr[data-volume="zulu"]');
		if (!row || row.dataset.state !== "free") return "zulu: " + (row ? row.dataset.state : "missing");
		const blocking = performance.getEntriesByType("resource").some((r) => /\/v1\/volumes\?index=\d+&wait=/.test(r.name));
		return blocking ? "" : "no blocking query on /v1/volumes";
	})()`)
	waitPage(t, detail, 60*time.Second, "zulu's claim freed, shown live on its page", `(() => {
		if (window.liveMarker !== "set") return "the page was reloaded";
		if (document.querySelector('tr[data-claim="web-zulu"]')) return "claim still shown as held";
		const row = document.querySelector('tr[data-released="web-zulu"]');
		if (!row) return "no released claim";
		const steps = [...row.querySelectorAll("li[data-step]")].map((li) => li.dataset.step).join(",");
		if (steps !== "taken,unpublishing,node-detached,controller-detached,freed") return "steps: " + steps;
		const times = [...row.querySelectorAll("li[data-step] time")].map((x) => x.getAttribute("datetime"));
		if (times.some((x) => !x || x.startsWith("0001-"))) return "a step without a time: " + times;
		const blocking = performance.getEntriesByType("resource").some((r) => /\/v1\/volume\/zulu\?index=\d+&wait=/.test(r.name));
		return blocking ? "" : "no blocking query on /v1/volume/zulu";
	})()`)
	shot(t, detail, "volume-freed")
	closeDetail()

	// Keyboard: on a freshly loaded page the first Tab reaches the skip
	// link, and Enter on it moves the focus to the content and stays on
	// the page. (The reload also shows the token kept for the tab.)
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volumes"), chromedp.Reload())
	waitPage(t, ctx, 30*time.Second, "volumes page", `document.querySelectorAll("#volumes tbody tr[data-volume]").length === 3 ? "" : "rows missing"`)
	do(t, ctx, chromedp.KeyEvent("\t"))
	waitPage(t, ctx, 10*time.Second, "skip link focused by Tab", `document.activeElement.className === "skip" ? "" : "focused: " + document.activeElement.outerHTML`)
	do(t, ctx, chromedp.KeyEvent("\r"))
	waitPage(t, ctx, 10*time.Second, "content focused by the skip link", `document.activeElement.id === "main" && location.hash === "#/volumes" ? "" : "focused: " + document.activeElement.tagName + " at " + location.hash`)
	// Filters: search by ID, and by state.
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#vol-search"), "bra"))
	waitPage(t, ctx, 10*time.Second, "search by ID", `(() => {
		const ids = [...document.querySelectorAll("#volumes tbody tr[data-volume]")].map((r) => r.dataset.volume).join(",");
		return ids === "bravo" && document.activeElement.id === "vol-search" ? "" : "rows: " + ids + ", focus " + document.activeElement.id;
	})()`)
	waitPage(t, ctx, 10*time.Second, "filter by state", `(() => {
		const search = document.querySelector("#vol-search");
		search.value = "";
		search.dispatchEvent(new Event("input"));
		const sel = document.querySelector("#vol-state");
		sel.value = "free";
		sel.dispatchEvent(new Event("change"));
		const ids = [...document.querySelectorAll("#volumes tbody tr[data-volume]")].map((r) => r.dataset.volume).join(",");
		return ids === "alpha,zulu" ? "" : "rows: " + ids;
	})()`)
	waitPage(t, ctx, 10*time.Second, "filters cleared", `(() => {
		const sel = document.querySelector("#vol-state");
		sel.value = "";
		sel.dispatchEvent(new Event("change"));
		return document.querySelectorAll("#volumes tbody tr[data-volume]").length === 3 ? "" : "rows missing";
	})()`)

	// The other pages render their data (and are the screenshots).
	for _, p := range []struct{ hash, cond, name string }{
		{"#/cluster", `(() => {
			// Each server's build, in its own column (issue 29).
			const row = document.querySelector("tr[data-server]");
			if (!row) return "no server row";
			const cols = [...row.closest("table").querySelectorAll("th")].map((th) => th.textContent);
			const i = cols.indexOf("Version");
			if (i < 0 || row.children[i].textContent !== ` + strconv.Quote(version.Short()) + `) return "version column: " + cols.join(",") + " | " + row.textContent;
			// Last contact as the CLI shows it, not "60.934381ms" (issue 30).
			const lc = row.children[cols.indexOf("Last contact")].textContent;
			return /^([0-9]+ms|[0-9.]+s|[0-9]+m[0-9.]+s|never)$/.test(lc) ? "" : "last contact: " + lc;
		})()`, "cluster"},
		{"#/nodes", `(() => {
			if (!document.querySelector("article[data-node]") || !document.querySelector("tr[data-plugin=hostdir]")) return "no node or plugin";
			// Its one controller is admitted: none pending (issue 38).
			const pending = document.querySelector("tr[data-plugin=hostdir] td[data-pending]");
			return pending && pending.dataset.pending === "0" && pending.textContent === "none" ? "" : "pending column: " + (pending ? pending.outerHTML : "missing");
		})()`, "nodes"},
		{"#/evals", `document.querySelector("tr[data-eval][data-status=complete]") ? "" : "no complete eval"`, "evals"},
		{"#/allocs", `(() => {
			const held = document.querySelector('tr[data-alloc="web-bravo"]');
			const stopped = document.querySelector('tr[data-alloc="web-zulu"]');
			if (!held || !stopped) return "alloc rows missing";
			return held.textContent.includes("bravo (taken)") && stopped.textContent.includes("zulu (freed)") ? "" : held.textContent + " | " + stopped.textContent;
		})()`, "allocs"},
	} {
		do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/"+p.hash))
		waitPage(t, ctx, 30*time.Second, p.name+" page", p.cond)
		shot(t, ctx, p.name)
	}

	// A read-only token cannot detach: the button is there, the server
	// refuses, the page names the capability, and the claim stays.
	useToken(t, ctx, e.readOnlyToken(t))
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volume/bravo"))
	waitPage(t, ctx, 30*time.Second, "bravo detail", `document.querySelector('tr[data-claim="web-bravo"] button.detach') ? "" : "no detach button"`)
	do(t, ctx, chromedp.Click(chromedp.CSS(`tr[data-claim="web-bravo"] button.detach`)))
	waitPage(t, ctx, 30*time.Second, "403 naming the capability", `(() => {
		const e = document.querySelector("#error");
		return !e.hidden && e.textContent.includes("volume:detach") && e.textContent.includes("Permission denied") ? "" : "error: " + e.textContent;
	})()`)
	shot(t, ctx, "read-only-detach")
	v, _, err := e.api.Volume(harness.Ctx(t, 10*time.Second), "bravo", structs.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Claim("web-bravo"); c == nil || c.State != structs.ClaimStateTaken || len(v.PastClaims) != 0 {
		t.Fatalf("bravo after a refused detach exp: web-bravo's claim still taken got: %+v past %v", c, v.PastClaims)
	}

	// The agent goes away: the page says so, and recovers by itself when
	// the agent is back.
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volumes"))
	waitPage(t, ctx, 30*time.Second, "volumes page", `document.querySelector("#volumes tbody tr[data-volume]") ? "" : "no rows"`)
	if err := e.http.Shutdown(); err != nil {
		t.Logf("shutdown: %v", err)
	}
	waitPage(t, ctx, 60*time.Second, "connection lost banner", `(() => {
		const b = document.querySelector("#banner");
		// Past the answer of the query that was in flight: the browser
		// itself cannot connect ("Failed to fetch").
		return !b.hidden && b.textContent.includes("Connection to the agent lost") && b.textContent.includes("Failed to fetch") ? "" : "banner: " + b.hidden + " " + b.textContent;
	})()`)
	shot(t, ctx, "connection-lost")
	e.startHTTP(t)
	waitPage(t, ctx, 60*time.Second, "recovered after the agent came back", `(() => {
		const b = document.querySelector("#banner");
		if (!b.hidden) return "banner still shown: " + b.textContent;
		return document.querySelectorAll("#volumes tbody tr[data-volume]").length === 3 ? "" : "rows missing";
	})()`)
}
