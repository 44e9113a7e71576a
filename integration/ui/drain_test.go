package uitest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// Drain from the UI (issue 26): the button shows the dry run's plan first
// and changes nothing until confirmed; confirmed, the node turns
// ineligible and its volume is freed, and the volume's page shows how
// the release went (the node-detach path).
func TestUI_DrainPreviewThenConfirm(t *testing.T) {
	needTools(t)
	e := newUIEnv(t)
	e.register(t, "alpha")
	e.runAlloc(t, "web-alpha", "alpha")
	node := e.worker.NodeID()

	ctx := newBrowser(t, e.c.PKI(), e.http.URL())
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/node/"+node))
	useToken(t, ctx, e.c.ManagementToken())
	// Before the drain the volume's page shows its usage as the node
	// reports it (issue 27).
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volume/alpha"))
	waitPage(t, ctx, 30*time.Second, "the claimed volume's usage", `(() => {
		const row = document.querySelector('tr[data-usage="web-alpha"]');
		if (!row) return "no usage row: " + document.querySelector("main").innerText.slice(0, 300);
		return /\d B|KiB|MiB|GiB/.test(row.innerText) ? "" : "usage row without sizes: " + row.innerText;
	})()`)
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/node/"+node))
	waitPage(t, ctx, 30*time.Second, "node card with its actions", `document.querySelector("article[data-node] button.drain") ? "" : "no drain button: " + document.querySelector("main").innerText`)
	do(t, ctx, chromedp.Click(chromedp.CSS(`article[data-node] button.drain`)))
	waitPage(t, ctx, 30*time.Second, "the drain plan shown before anything happens", `(() => {
		const p = document.querySelector(".drain-plan");
		if (!p) return "no plan; error: " + document.querySelector("#error").textContent + "; main: " + document.querySelector("main").innerText.slice(0, 300);
		if (!p.querySelector('tr[data-plan-volume="alpha"]')) return "plan without alpha: " + p.innerText;
		if (!p.innerText.includes("must keep serving until it is done: hostdir")) return "plugins: " + p.innerText;
		return "";
	})()`)
	shot(t, ctx, "drain-plan")
	// The preview changed nothing.
	n, _, err := e.api.Node(harness.Ctx(t, 10*time.Second), node, structs.QueryOptions{})
	if err != nil || n.Eligibility == structs.NodeIneligible {
		t.Fatalf("node after the preview exp: still eligible got: %+v %v", n, err)
	}
	e.waitAlloc(t, "web-alpha", structs.AllocClientRunning)

	// A marker on the page's window: it survives only if the page is
	// never reloaded, so its presence later proves the update came live.
	eval[string](t, ctx, `window.liveMarker = "set"; "ok"`)

	do(t, ctx, chromedp.Click(chromedp.CSS(`.drain-plan button.drain-confirm`)))
	harness.WaitFor(t, 60*time.Second, func() error {
		st, _, err := e.api.NodeDrainStatus(harness.Ctx(t, 10*time.Second), node, structs.QueryOptions{})
		if err != nil {
			return err
		}
		if !st.Done {
			return fmt.Errorf("drain exp: done got: %+v", st)
		}
		return nil
	})
	// Live: the page wakes on the claims' change itself (ui Sources), not
	// when its blocking query on the nodes runs out (15 s); 8 s fails a
	// page that waits for that and leaves room for a busy -race machine.
	// A page blocking on the nodes alone still passes the bound when a
	// node write (a re-registration) happens to follow the release: the
	// blocking query on the volumes is asserted too.
	done := time.Now()
	waitPage(t, ctx, 8*time.Second, "node shown ineligible and drained, live", `(() => {
		if (window.liveMarker !== "set") return "the page was reloaded";
		const card = document.querySelector("article[data-node]");
		if (!card.innerText.includes("ineligible")) return "card: " + card.innerText;
		if (!card.innerText.includes("drained: its node plugins may be stopped")) return "not shown drained: " + card.innerText;
		const blocking = performance.getEntriesByType("resource").some((r) => /\/v1\/volumes\?index=\d+&wait=/.test(r.name));
		return blocking ? "" : "no blocking query on /v1/volumes";
	})()`)
	t.Logf("drain done to the page showing it drained: %s", time.Since(done).Round(time.Millisecond))
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volume/alpha"))
	waitPage(t, ctx, 30*time.Second, "the freed claim's release path", `(() => {
		const row = document.querySelector('tr[data-released="web-alpha"]');
		if (!row) return "no released claim: " + document.querySelector("main").innerText;
		const p = row.querySelector("[data-path]");
		return p && p.dataset.path === "node-detach" ? "" : "path: " + (p ? p.dataset.path : "none");
	})()`)
}
