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
	waitPage(t, ctx, 60*time.Second, "node shown ineligible and drained, live", `(() => {
		const card = document.querySelector("article[data-node]");
		if (!card.innerText.includes("ineligible")) return "card: " + card.innerText;
		return card.innerText.includes("drained: its node plugins may be stopped") ? "" : "not shown drained: " + card.innerText;
	})()`)
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volume/alpha"))
	waitPage(t, ctx, 30*time.Second, "the freed claim's release path", `(() => {
		const row = document.querySelector('tr[data-released="web-alpha"]');
		if (!row) return "no released claim: " + document.querySelector("main").innerText;
		const p = row.querySelector("[data-path]");
		return p && p.dataset.path === "node-detach" ? "" : "path: " + (p ? p.dataset.path : "none");
	})()`)
}
