package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// GET /v1/agent/self shows every configuration key under its file name,
// and a token only as redacted.
func TestSelfConfig_EveryKeyAndNoSecret(t *testing.T) {
	f := agentFlags{aclToken: "5ecret-token-value", join: "10.0.0.2:4647,10.0.0.3:4647", httpAddr: "127.0.0.1:4646"}
	f.tls.KeyFile = "/etc/claimd/server-key.pem"
	cfg := selfConfig(&f)
	for _, k := range configKeys {
		m := cfg
		if k.block != "" {
			var ok bool
			if m, ok = cfg[k.block].(map[string]any); !ok {
				t.Fatalf("block %s exp: a map got: %#v", k.block, cfg[k.block])
			}
		}
		if _, ok := m[k.name]; !ok {
			t.Errorf("key %s exp: shown got: missing", k.path())
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "5ecret") {
		t.Fatalf("self config exp: no token got: %s", b)
	}
	acl := cfg["acl"].(map[string]any)
	srv := cfg["server"].(map[string]any)
	tls := cfg["tls"].(map[string]any)
	if acl["token"] != "<redacted>" || tls["key_file"] != "/etc/claimd/server-key.pem" || len(srv["join"].([]string)) != 2 {
		t.Fatalf("self config exp: token redacted, key file path, join list got: %s", b)
	}
}

// GET /v1/agent/self answers without a token: a fence command, whose
// command line may carry a credential, shows only that it is set (issue
// 38); an unset one shows empty.
func TestSelfConfig_FenceCommandRedacted(t *testing.T) {
	f := agentFlags{fenceCommand: `curl -fsS -H "Authorization: Bearer f3nce-cred" https://fence.example/stop`}
	b, err := json.Marshal(selfConfig(&f))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "f3nce-cred") || strings.Contains(string(b), "fence.example") {
		t.Fatalf("self config exp: no fence command got: %s", b)
	}
	if got := selfConfig(&f)["client"].(map[string]any)["fence_command"]; got != "<redacted>" {
		t.Fatalf("fence_command exp: <redacted> got: %v", got)
	}
	if got := selfConfig(&agentFlags{})["client"].(map[string]any)["fence_command"]; got != "" {
		t.Fatalf("unset fence_command exp: empty got: %v", got)
	}
}
