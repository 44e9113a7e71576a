package uitest

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// A node's failed fence (issue 39) on the volume page: the volume's health
// is abnormal and an alert says where it may still be written and why; the
// volumes page lists it first, marked.
// The report comes as a node's registration brings it (a node of its own
// here: the fence itself is integration/node_fence_loud_test.go's).
func TestUI_VolumePageShowsAFailedFence(t *testing.T) {
	needTools(t)
	e := newUIEnv(t)
	e.register(t, "alpha", "bravo")
	at := time.Now().Add(-time.Minute).UTC()
	n := &structs.Node{ID: "fenced-node", Name: "rack7-host3", SecretID: "fenced-node-secret", Status: structs.NodeStatusReady,
		LastFence: &structs.FenceReport{At: at, LeaseRemaining: time.Second, Volumes: []*structs.FencedVolume{{
			AllocID: "web-1", VolumeID: "bravo", HookOK: false, Unmounted: true, Done: at.Add(time.Second),
			Error: "fence command: exit status 1 (output: \"no such process\")"}}}}
	if _, err := e.api.RegisterNode(harness.Ctx(t, 30*time.Second), n); err != nil {
		t.Fatal(err)
	}

	ctx := newBrowser(t, e.c.PKI(), e.http.URL())
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volume/bravo"))
	useToken(t, ctx, e.c.ManagementToken())
	waitPage(t, ctx, 30*time.Second, "bravo abnormal with the failed fence", `(() => {
		const health = document.querySelector("[data-health]");
		if (!health || health.dataset.health !== "abnormal") return "health: " + (health ? health.outerHTML : "none");
		const alert = document.querySelector('[data-fence-failed="fenced-node/web-1"]');
		if (!alert) return "no alert: " + document.querySelector("main").innerText;
		const text = alert.innerText;
		for (const want of ["fence failed", "may still be written on node rack7-host3", "alloc web-1", "fence command failed: fence command: exit status 1"]) {
			if (!text.includes(want)) return "alert exp: " + want + " got: " + text;
		}
		return "";
	})()`)
	// The volumes page lists it first (alpha sorts first by ID), marked.
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#/volumes"))
	waitPage(t, ctx, 30*time.Second, "bravo listed first, marked fence failed", `(() => {
		const rows = [...document.querySelectorAll("#volumes tbody tr[data-volume]")];
		if (rows.length !== 2) return "rows: " + rows.length;
		if (rows[0].dataset.volume !== "bravo") return "first: " + rows[0].dataset.volume;
		if (!rows[0].querySelector("[data-fence-failed]")) return "bravo not marked: " + rows[0].innerText;
		if (rows[1].querySelector("[data-fence-failed]")) return "alpha marked: " + rows[1].innerText;
		return "";
	})()`)
	if html := eval[string](t, ctx, `document.documentElement.outerHTML`); strings.Contains(html, volumeSecret) {
		t.Fatalf("volume page exp: no volume secret got: %q in the page", volumeSecret)
	}
}
