package uitest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A script or a headless browser gives the token in the address's
// fragment (#token=SECRET&page=/nodes), which never reaches the server:
// the page keeps it for the tab, shows the page named, and leaves no
// token in the address or the history.
func TestUI_TokenFromTheAddressFragment(t *testing.T) {
	needTools(t)
	e := newUIEnv(t)
	e.register(t, "alpha")
	ctx := newBrowser(t, e.c.PKI(), e.http.URL())
	do(t, ctx, chromedp.Navigate(e.http.URL()+"/ui/#token="+e.c.ManagementToken()+"&page=/volumes"))
	waitPage(t, ctx, 60*time.Second, "token taken from the fragment, volumes listed", `(() => {
		if (location.href.includes("token")) return "address still holds the token: " + location.href;
		if (location.hash !== "#/volumes") return "hash: " + location.hash;
		if (!document.getElementById("token-state").textContent.includes("token set")) return "token state: " + document.getElementById("token-state").textContent;
		const rows = document.querySelectorAll("#volumes tbody tr");
		if (rows.length !== 1) return "rows: " + rows.length + " " + document.querySelector("main").innerText;
		return "";
	})()`)
}
