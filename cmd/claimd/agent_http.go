package main

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/client"
	"github.com/claimd/claimd/httpapi"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/telemetry"
	"github.com/claimd/claimd/tlsutil"
)

// httpDisabled reports whether -http-addr turns the HTTP API off.
func httpDisabled(addr string) bool { return addr == "" || addr == "off" }

// startHTTP serves the HTTP API (package httpapi) for a running agent: its
// handlers call this agent's server, or a client agent's servers, with the
// agent's TLS settings. The caller stops it.
func startHTTP(f agentFlags, srv *server.Server, agent *client.Agent, servers []string, tlsConf *tlsutil.Configurator, logger hclog.Logger) (*httpapi.Server, error) {
	cfg := httpapi.Config{
		Addr: f.httpAddr, TLS: tlsConf, RPCAddrs: servers, Logger: logger.Named("http"),
		AllowedHosts: splitList(f.httpHosts),
		Self:         httpapi.Self{Config: selfConfig(&f)},
	}
	// Metrics: claimd's and hashicorp/raft's, in one registry (package
	// telemetry), served at /v1/metrics behind the operator:read check.
	tel, err := telemetry.Setup(telemetry.Config{ServiceName: "claimd",
		PrometheusRetention: f.promRetention, DisableHostname: f.disableHostname})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	cfg.Metrics = tel.Handler()
	if srv != nil {
		cfg.Server, cfg.RPCAddrs = srv, []string{srv.Addr()}
		cfg.Self.ServerID = srv.ID()
	}
	if agent != nil {
		cfg.Client = agent
		cfg.Self.NodeID = agent.NodeID()
	}
	h, err := httpapi.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := h.Start(); err != nil {
		h.Shutdown()
		return nil, err
	}
	return h, nil
}

// selfConfig is the agent's configuration as GET /v1/agent/self shows it:
// every key of configKeys, under the names a configuration file uses
// (top-level keys, then blocks), after files and flags were merged. A
// secret (a token) shows only as whether it is set; the TLS keys are
// file paths, never the files' contents; a command (fence_command) shows
// only whether it is set.
func selfConfig(f *agentFlags) map[string]any {
	out := map[string]any{}
	for _, k := range configKeys {
		v := selfValue(k, k.field(f))
		if isSecretKey(k.name) {
			if v != "" {
				v = "<redacted>"
			}
		}
		if k.block == "" {
			out[k.name] = v
			continue
		}
		b, ok := out[k.block].(map[string]any)
		if !ok {
			b = map[string]any{}
			out[k.block] = b
		}
		b[k.name] = v
	}
	return out
}

// isSecretKey: a key whose value is a credential or may hold one. By
// name, so that a new one (a "..._token") is redacted without anyone
// remembering to. A command (fence_command) is a command line the agent
// runs, and command lines carry credentials (curl -H "Authorization: ...",
// an environment assignment): GET /v1/agent/self answers without a token,
// so it shows only whether one is set (issue 38). It is redacted for every
// caller rather than shown to a privileged token: checking a token needs
// the servers, and this endpoint answers from the agent alone so that it
// can describe an agent cut off from them; an operator who needs the exact
// command has the agent's configuration file.
func isSecretKey(name string) bool {
	for _, w := range []string{"token", "secret", "password", "command"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// selfValue renders one key's value (field is the pointer configKey.field
// returns) as JSON shows it best.
func selfValue(k configKey, field any) any {
	switch p := field.(type) {
	case *string:
		if k.kind == kList {
			return orNone(splitList(*p))
		}
		return *p
	case *bool:
		return *p
	case *int:
		return *p
	case *float64:
		return *p
	case *time.Duration:
		return p.String()
	case *pluginFlags:
		type plugin struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Socket string `json:"socket"`
		}
		out := []plugin{}
		for _, pc := range *p {
			out = append(out, plugin{ID: pc.ID, Type: string(pc.Type), Socket: pc.Socket})
		}
		return out
	}
	// A kind added later: shown as text only if it cannot be a secret.
	if isSecretKey(k.name) {
		return "<redacted>"
	}
	return fmt.Sprint(reflect.ValueOf(field).Elem().Interface())
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
