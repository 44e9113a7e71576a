package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
)

// A real Prometheus (Debian's package, as an operator would install it)
// scrapes a dev agent with the scrape_config docs/metrics.md gives: TLS
// with a client certificate, the token from a file as a Bearer credential.
// It used to fail: the API took the token only as X-Claimd-Token, which
// Prometheus cannot send. CI installs prometheus; elsewhere the test is
// skipped unless CLAIMD_PROMETHEUS_REQUIRED is set.
func TestMetrics_RealPrometheusScrapesWithTheDocumentedConfig(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CLAIMD_PROMETHEUS_REQUIRED") != "" {
			t.Fatalf("prometheus is not on PATH and CLAIMD_PROMETHEUS_REQUIRED is set")
		}
		t.Skip("prometheus is not on PATH (CI's .ci/run installs Debian's package)")
	}
	_, env, apiURL, _ := startDevAgent(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "claimd-token")
	if err := os.WriteFile(tokenFile, []byte(env["CLAIMD_TOKEN"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(apiURL, "https://")
	// The scrape_config of docs/metrics.md, with this test's paths.
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: claimd
    scheme: https
    metrics_path: /v1/metrics
    params:
      format: [prometheus]
    tls_config:
      ca_file: %s
      cert_file: %s
      key_file: %s
    authorization:
      credentials_file: %s
    static_configs:
      - targets: ['%s']
`, env["CLAIMD_CACERT"], env["CLAIMD_CLIENT_CERT"], env["CLAIMD_CLIENT_KEY"], tokenFile, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := harness.FreeAddr(t)
	harness.StartProcessWith(t, bin, "prometheus", "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)

	query := func(q string) (string, error) {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return "", fmt.Errorf("query %s: %v: %s", q, err, b)
		}
		if len(out.Data.Result) == 0 || len(out.Data.Result[0].Value) < 2 {
			return "", fmt.Errorf("query %s: no result yet", q)
		}
		return fmt.Sprint(out.Data.Result[0].Value[1]), nil
	}
	targetError := func() string {
		resp, err := http.Get("http://" + promAddr + "/api/v1/targets")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	harness.WaitFor(t, 60*time.Second, func() error {
		v, err := query(`up{job="claimd"}`)
		if err != nil {
			return err
		}
		if v != "1" {
			return fmt.Errorf("up = %s; targets: %s", v, targetError())
		}
		if _, err := query(`claimd_build_info`); err != nil {
			return err
		}
		// Raft's replication metrics name no peer in the metric name.
		if v, err := query(`count({__name__=~"claimd_raft_.*[0-9a-f]{8}_[0-9a-f]{4}_.*"})`); err == nil {
			return fmt.Errorf("raft metrics with a peer ID in the name: %s", v)
		}
		return nil
	})
	if strings.Contains(targetError(), env["CLAIMD_TOKEN"]) {
		t.Fatalf("Prometheus's target page shows the token")
	}
}
