package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/claimd/claimd/leaderlease"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"

	"github.com/claimd/claimd/csi"
	"github.com/claimd/claimd/raftnode"
	"github.com/claimd/claimd/server"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
	"github.com/claimd/claimd/volspec"
)

// Agent configuration files (-config FILE|DIR, repeatable), HCL or JSON.
//
// One table, configKeys, holds every setting: where it sits in a file,
// the flag it stands for, its type, and whether SIGHUP may change it
// without a restart. Parsing, merging, "flags win" and the reload's
// comparison all walk that table, so a new flag is one new row here.
//
// Order of precedence, lowest first: flag defaults, files in the order
// given (a directory's *.hcl and *.json in lexical order), flags set on
// the command line. A file sets only the keys it names; a later file
// overrides an earlier one key by key (plugin blocks by plugin id).

// keyKind is the type a key's value must have in a file.
type keyKind int

const (
	kString   keyKind = iota
	kBool             // true or false, never "true"
	kInt              // a whole number
	kFloat            // any number
	kDuration         // a Go duration string, "10s", "5m"
	kList             // a list of strings (the flag takes them comma-separated)
	kPlugins          // client { plugin "ID" { type = ..., socket = ... } }
)

var kindNames = map[keyKind]string{kString: "a string", kBool: "true or false", kInt: "a whole number",
	kFloat: "a number", kDuration: `a duration string like "10s"`, kList: "a list of strings", kPlugins: "plugin blocks"}

// configKey is one setting.
type configKey struct {
	block string // "" = top level, else the block it sits in
	name  string
	flag  string // the agent flag it stands for ("" = files only)
	kind  keyKind
	// live: SIGHUP applies a change to the running agent. Every other
	// change is reported as needing a restart.
	live  bool
	check func(v any) error // nil = any value of the kind
	field func(f *agentFlags) any
}

func (k configKey) path() string {
	if k.block == "" {
		return k.name
	}
	return k.block + "." + k.name
}

// configBlocks are the top-level blocks, in the order docs/operations.md shows them.
var configBlocks = []string{"server", "client", "tls", "acl", "telemetry"}

var configKeys = []configKey{
	{"", "node_name", "node-name", kString, false, nil, func(f *agentFlags) any { return &f.nodeName }},
	{"", "data_dir", "data-dir", kString, false, nil, func(f *agentFlags) any { return &f.dataDir }},
	{"", "bind", "bind", kString, false, hostPort, func(f *agentFlags) any { return &f.bind }},
	{"", "advertise", "advertise", kString, false, hostPort, func(f *agentFlags) any { return &f.advertise }},
	{"", "http_addr", "http-addr", kString, false, httpAddr, func(f *agentFlags) any { return &f.httpAddr }},
	{"", "http_allowed_hosts", "http-allowed-hosts", kList, false, hostNames, func(f *agentFlags) any { return &f.httpHosts }},
	{"", "region", "region", kString, false, nonEmpty, func(f *agentFlags) any { return &f.tls.Region }},
	{"", "log_level", "log-level", kString, true, logLevel, func(f *agentFlags) any { return &f.logLevel }},
	{"", "log_json", "log-json", kBool, false, nil, func(f *agentFlags) any { return &f.logJSON }},
	{"", "debug_addr", "debug-addr", kString, false, hostPort, func(f *agentFlags) any { return &f.debugAddr }},
	{"", "dev", "dev", kBool, false, nil, func(f *agentFlags) any { return &f.dev }},
	{"", "dev_insecure", "dev-insecure", kBool, false, nil, func(f *agentFlags) any { return &f.devInsecure }},

	{"server", "enabled", "server", kBool, false, nil, func(f *agentFlags) any { return &f.server }},
	{"server", "bootstrap_expect", "bootstrap-expect", kInt, false, notNegative, func(f *agentFlags) any { return &f.bootstrapExpect }},
	{"server", "join", "join", kList, false, hostPorts, func(f *agentFlags) any { return &f.join }},
	{"server", "raft_multiplier", "raft-multiplier", kFloat, false, positive, func(f *agentFlags) any { return &f.raftMultiplier }},
	{"server", "raft_log_store", "raft-log-store", kString, false, raftLogStore, func(f *agentFlags) any { return &f.raftLogStore }},
	{"server", "heartbeat_ttl", "heartbeat-ttl", kDuration, true, positive, func(f *agentFlags) any { return &f.heartbeatTTL }},
	{"server", "storage_lease", "storage-lease", kDuration, false, storageLease, func(f *agentFlags) any { return &f.storageLease }},
	{"server", "claim_gc_interval", "claim-gc-interval", kDuration, true, positive, func(f *agentFlags) any { return &f.claimGCInterval }},
	{"server", "reconcile_interval", "reconcile-interval", kDuration, true, nil, func(f *agentFlags) any { return &f.reconcileEvery }},
	{"server", "release_workers", "release-workers", kInt, false, positive, func(f *agentFlags) any { return &f.releaseWorkers }},
	{"server", "release_backoff_base", "release-backoff-base", kDuration, true, positive, func(f *agentFlags) any { return &f.backoffBase }},
	{"server", "release_backoff_max", "release-backoff-max", kDuration, true, positive, func(f *agentFlags) any { return &f.backoffMax }},
	{"server", "leave_on_terminate", "leave-on-terminate", kBool, false, nil, func(f *agentFlags) any { return &f.leaveOnTerm }},
	{"server", "tls_handshake_timeout", "tls-handshake-timeout", kDuration, false, tlsHandshakeTimeout, func(f *agentFlags) any { return &f.tlsHandshake }},
	{"server", "autopilot_cleanup_dead_servers", "autopilot-cleanup-dead-servers", kBool, false, nil, func(f *agentFlags) any { return &f.apCleanupDead }},

	{"client", "enabled", "client", kBool, false, nil, func(f *agentFlags) any { return &f.client }},
	{"client", "servers", "servers", kList, false, hostPorts, func(f *agentFlags) any { return &f.servers }},
	{"client", "plugin_probe_interval", "plugin-probe-interval", kDuration, false, positive, func(f *agentFlags) any { return &f.probeInterval }},
	{"client", "plugin", "csi-plugin", kPlugins, false, nil, func(f *agentFlags) any { return &f.plugins }},
	{"client", "node_lease", "node-lease", kDuration, false, nodeLease, func(f *agentFlags) any { return &f.nodeLease }},
	{"client", "fence_command", "fence-command", kString, false, nil, func(f *agentFlags) any { return &f.fenceCommand }},
	{"client", "fence_timeout", "fence-timeout", kDuration, false, notNegativeDuration, func(f *agentFlags) any { return &f.fenceTimeout }},
	{"client", "own_detach_timeout", "own-detach-timeout", kDuration, false, positive, func(f *agentFlags) any { return &f.ownDetach }},

	// The TLS files are re-read on every SIGHUP (certificate rotation);
	// pointing at other files needs a restart.
	{"tls", "ca_file", "tls-ca-file", kString, false, nil, func(f *agentFlags) any { return &f.tls.CAFile }},
	{"tls", "cert_file", "tls-cert-file", kString, false, nil, func(f *agentFlags) any { return &f.tls.CertFile }},
	{"tls", "key_file", "tls-key-file", kString, false, nil, func(f *agentFlags) any { return &f.tls.KeyFile }},
	{"tls", "verify_server_hostname", "tls-verify-server-hostname", kBool, false, nil, func(f *agentFlags) any { return &f.tls.VerifyServerHostname }},
	{"tls", "allow_plaintext", "tls-allow-plaintext", kBool, false, nil, func(f *agentFlags) any { return &f.tlsAllowPlain }},

	{"acl", "enabled", "acl-enabled", kBool, false, nil, func(f *agentFlags) any { return &f.aclEnabled }},
	// A secret: never logged, never shown in an error (kString values
	// are not echoed).
	{"acl", "token", "acl-token", kString, false, nil, func(f *agentFlags) any { return &f.aclToken }},

	{"telemetry", "prometheus_retention", "", kDuration, false, positive, func(f *agentFlags) any { return &f.promRetention }},
	{"telemetry", "disable_hostname", "", kBool, false, nil, func(f *agentFlags) any { return &f.disableHostname }},
}

// configPaths collects repeated -config FILE|DIR.
type configPaths []string

func (p *configPaths) String() string { return strings.Join(*p, ",") }
func (p *configPaths) Set(s string) error {
	*p = append(*p, s)
	return nil
}

// agentConfig is what a set of files says: only the keys they name, by
// configKey.path(), each a string, bool, int, float64, time.Duration,
// []string or []csi.PluginConfig (checked as read).
type agentConfig struct {
	values map[string]any
}

// loadConfigFiles reads the -config paths in order and merges them.
func loadConfigFiles(paths []string) (*agentConfig, error) {
	out := &agentConfig{values: map[string]any{}}
	for _, p := range paths {
		files, err := configFilesOf(p)
		if err != nil {
			return nil, err
		}
		for _, name := range files {
			c, err := parseConfigFile(name)
			if err != nil {
				return nil, err
			}
			out.merge(c)
		}
	}
	return out, nil
}

// configFilesOf is p itself, or a directory's *.hcl and *.json files in
// lexical order (other files, like a README or an editor's backup, are
// left alone; so are subdirectories).
func configFilesOf(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	var out []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".hcl" || ext == ".json") {
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	return out, nil
}

// parseConfigFile reads one file: JSON if it ends in .json, HCL otherwise.
func parseConfigFile(name string) (*agentConfig, error) {
	src, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	var file *hcl.File
	var diags hcl.Diagnostics
	if filepath.Ext(name) == ".json" {
		file, diags = hcljson.Parse(src, name)
	} else {
		file, diags = hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	}
	d := &decoder{out: &agentConfig{values: map[string]any{}}}
	if d.diags("", diags); !diags.HasErrors() {
		d.body("", file.Body)
	}
	if len(d.errs) > 0 {
		// In the file's order, whatever order the keys were checked in.
		slices.SortStableFunc(d.errs, func(a, b configError) int { return a.line - b.line })
		lines := make([]string, len(d.errs))
		for i, e := range d.errs {
			lines[i] = e.msg
		}
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	return d.out, nil
}

// decoder walks one file's body against configKeys and collects every
// error (a file with three mistakes is refused with three lines).
type decoder struct {
	out  *agentConfig
	errs []configError
}

// configError is one line of a refused file's error.
type configError struct {
	line int
	msg  string // "FILE:LINE: KEY: problem"
}

func (d *decoder) fail(at hcl.Range, key, format string, args ...any) {
	d.errs = append(d.errs, configError{at.Start.Line,
		fmt.Sprintf("%s:%d: %s: %s", at.Filename, at.Start.Line, key, fmt.Sprintf(format, args...))})
}

// diags keeps HCL's own diagnostics (syntax errors, unknown keys) as
// "FILE:LINE: BLOCK: summary; detail".
func (d *decoder) diags(block string, diags hcl.Diagnostics) {
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		where, line := "", 0
		if diag.Subject != nil {
			where, line = fmt.Sprintf("%s:%d: ", diag.Subject.Filename, diag.Subject.Start.Line), diag.Subject.Start.Line
		}
		switch {
		case block != "":
			where += block + ": "
		case diag.Summary == "Unsupported argument" || diag.Summary == "Extraneous JSON object property":
			where += "top level: "
		}
		d.errs = append(d.errs, configError{line, where + diag.Summary + "; " + diag.Detail})
	}
}

// body decodes the top level (block "") or one top-level block.
func (d *decoder) body(block string, body hcl.Body) {
	schema := &hcl.BodySchema{}
	for _, k := range configKeys {
		if k.block == block && k.kind != kPlugins {
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: k.name})
		}
	}
	switch block {
	case "":
		for _, b := range configBlocks {
			schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: b})
		}
	case "client":
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: "plugin", LabelNames: []string{"id"}})
	}
	content, diags := body.Content(schema)
	d.diags(block, diags)
	if content == nil {
		return
	}
	for _, k := range configKeys {
		if k.block != block || k.kind == kPlugins {
			continue
		}
		if attr, ok := content.Attributes[k.name]; ok {
			d.attr(k, attr)
		}
	}
	seen := map[string]hcl.Range{}
	var plugins []csi.PluginConfig
	for _, b := range content.Blocks {
		name := b.Type
		if b.Type == "plugin" {
			name = fmt.Sprintf("client.plugin %q", b.Labels[0])
		}
		if first, dup := seen[name]; dup {
			d.fail(b.DefRange, name, "defined twice (first at line %d); put its keys in one block", first.Start.Line)
			continue
		}
		seen[name] = b.DefRange
		if b.Type != "plugin" {
			d.body(b.Type, b.Body)
		} else if pc, ok := d.plugin(name, b); ok {
			plugins = append(plugins, pc)
		}
	}
	if plugins != nil {
		d.out.values["client.plugin"] = plugins
	}
}

// plugin decodes client { plugin "ID" { type = "...", socket = "...",
// controller_calls = N } } (controller_calls optional).
func (d *decoder) plugin(key string, b *hcl.Block) (csi.PluginConfig, bool) {
	content, diags := b.Body.Content(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "type", Required: true}, {Name: "socket", Required: true}, {Name: "controller_calls"}}})
	d.diags(key, diags)
	if diags.HasErrors() {
		return csi.PluginConfig{}, false
	}
	pc := csi.PluginConfig{ID: b.Labels[0]}
	typ, ok1 := d.value(key+".type", kString, content.Attributes["type"])
	sock, ok2 := d.value(key+".socket", kString, content.Attributes["socket"])
	if !ok1 || !ok2 {
		return pc, false
	}
	pc.Type, pc.Socket = csi.PluginType(typ.(string)), sock.(string)
	if attr := content.Attributes["controller_calls"]; attr != nil {
		n, ok := d.value(key+".controller_calls", kInt, attr)
		if !ok {
			return pc, false
		}
		pc.ControllerCalls = n.(int)
	}
	if err := pc.Validate(); err != nil {
		var ce *structs.CodedError
		msg := err.Error()
		if errors.As(err, &ce) {
			msg = ce.Message
		}
		d.fail(b.DefRange, key, "%s", msg)
		return pc, false
	}
	return pc, true
}

func (d *decoder) attr(k configKey, attr *hcl.Attribute) {
	v, ok := d.value(k.path(), k.kind, attr)
	if !ok {
		return
	}
	if k.check != nil {
		if err := k.check(v); err != nil {
			d.fail(attr.Expr.Range(), k.path(), "%v", err)
			return
		}
	}
	d.out.values[k.path()] = v
}

// value evaluates an attribute (no variables or functions: a file is
// data) and checks its type strictly: "3" is not a number and "true" is
// not a bool, so that a quoting mistake is caught rather than guessed at.
func (d *decoder) value(key string, kind keyKind, attr *hcl.Attribute) (any, bool) {
	at := attr.Expr.Range()
	// A bare word (enabled = yes) would be evaluated as a variable, and
	// HCL would answer "Variables not allowed": say what the key wants.
	if word, ok := volspec.BareWord(attr.Expr); ok {
		d.fail(at, key, "want %s, got the bare word %s (a string needs quotes)", kindNames[kind], word)
		return nil, false
	}
	val, diags := attr.Expr.Value(nil)
	if diags.HasErrors() {
		d.diags(key, diags)
		return nil, false
	}
	bad := func() (any, bool) {
		d.fail(at, key, "want %s, got %s", kindNames[kind], describe(val))
		return nil, false
	}
	if val.IsNull() || !val.IsKnown() {
		return bad()
	}
	switch kind {
	case kString, kDuration:
		if val.Type() != cty.String {
			return bad()
		}
		s := val.AsString()
		if kind == kString {
			return s, true
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.fail(at, key, "%q is not a duration (like \"10s\", \"5m\" or \"1h30m\")", s)
			return nil, false
		}
		return dur, true
	case kBool:
		if val.Type() != cty.Bool {
			return bad()
		}
		return val.True(), true
	case kInt:
		if val.Type() != cty.Number {
			return bad()
		}
		i, acc := val.AsBigFloat().Int64()
		if acc != big.Exact {
			return bad()
		}
		return int(i), true
	case kFloat:
		if val.Type() != cty.Number {
			return bad()
		}
		f, _ := val.AsBigFloat().Float64()
		return f, true
	case kList:
		if !val.Type().IsTupleType() && !val.Type().IsListType() {
			return bad()
		}
		out := []string{}
		for it := val.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.IsNull() || e.Type() != cty.String {
				return bad()
			}
			out = append(out, e.AsString())
		}
		return out, true
	}
	return bad()
}

// describe names a value's type for an error without echoing strings
// (acl.token is a string key: a secret must not reach a log).
func describe(v cty.Value) string {
	switch {
	case v.IsNull():
		return "null"
	case v.Type() == cty.String:
		return "a string"
	case v.Type() == cty.Number:
		return "the number " + v.AsBigFloat().Text('g', -1)
	case v.Type() == cty.Bool:
		return "a bool"
	case v.Type().IsTupleType() || v.Type().IsListType():
		return "a list"
	case v.Type().IsObjectType() || v.Type().IsMapType():
		return "an object"
	}
	return v.Type().FriendlyName()
}

// merge lays c over a: c's keys win, plugins merge by id (a file per
// plugin in a directory adds up; the same id later replaces it).
func (a *agentConfig) merge(c *agentConfig) {
	for key, v := range c.values {
		if old, ok := a.values[key]; ok && key == "client.plugin" {
			merged := slices.Clone(old.([]csi.PluginConfig))
			for _, p := range v.([]csi.PluginConfig) {
				i := slices.IndexFunc(merged, func(q csi.PluginConfig) bool { return q.ID == p.ID })
				if i >= 0 {
					merged[i] = p
				} else {
					merged = append(merged, p)
				}
			}
			v = merged
		}
		a.values[key] = v
	}
}

// apply sets f's fields from the files, except those whose flag was set
// on the command line (the command line wins, -csi-plugin included: any
// -csi-plugin replaces the files' plugins).
func (a *agentConfig) apply(f *agentFlags, onCommandLine map[string]bool) {
	for _, k := range configKeys {
		v, ok := a.values[k.path()]
		if !ok || (k.flag != "" && onCommandLine[k.flag]) {
			continue
		}
		switch p := k.field(f).(type) {
		case *string:
			if k.kind == kList {
				*p = strings.Join(v.([]string), ",")
			} else {
				*p = v.(string)
			}
		case *bool:
			*p = v.(bool)
		case *int:
			*p = v.(int)
		case *float64:
			*p = v.(float64)
		case *time.Duration:
			*p = v.(time.Duration)
		case *pluginFlags:
			*p = slices.Clone(v.([]csi.PluginConfig))
		default:
			panic(fmt.Sprintf("config key %s: field type %T", k.path(), p))
		}
	}
}

// get is the key's current value in f, for comparing two configurations.
func (k configKey) get(f *agentFlags) any {
	return reflect.ValueOf(k.field(f)).Elem().Interface()
}

func (k configKey) set(f *agentFlags, from *agentFlags) {
	reflect.ValueOf(k.field(f)).Elem().Set(reflect.ValueOf(k.field(from)).Elem())
}

// Value checks (the file's line and key are added by the caller).

func nonEmpty(v any) error {
	if v.(string) == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func storageLease(v any) error {
	d := v.(time.Duration)
	if d < leaderlease.Min || d > leaderlease.Max {
		return fmt.Errorf("%s is outside %s to %s", d, leaderlease.Min, leaderlease.Max)
	}
	return nil
}

func tlsHandshakeTimeout(v any) error {
	d := v.(time.Duration)
	if d < server.MinTLSHandshakeTimeout || d > server.MaxTLSHandshakeTimeout {
		return fmt.Errorf("%s is outside %s to %s", d, server.MinTLSHandshakeTimeout, server.MaxTLSHandshakeTimeout)
	}
	return nil
}

func raftLogStore(v any) error {
	if s := v.(string); s != raftnode.LogStoreBoltDB && s != raftnode.LogStoreWAL {
		return fmt.Errorf("%q is not a Raft log store (want %s or %s)", s, raftnode.LogStoreBoltDB, raftnode.LogStoreWAL)
	}
	return nil
}

func logLevel(v any) error {
	if hclog.LevelFromString(v.(string)) == hclog.NoLevel {
		return fmt.Errorf("%q is not one of trace, debug, info, warn, error", v)
	}
	return nil
}

func hostPort(v any) error {
	if s := v.(string); s != "" {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%q is not host:port", s)
		}
	}
	return nil
}

// httpAddr is host:port, or "" or "off" (no HTTP API), as -http-addr.
func httpAddr(v any) error {
	if httpDisabled(v.(string)) {
		return nil
	}
	return hostPort(v)
}

// hostNames are DNS names without a port or scheme, as
// -http-allowed-hosts takes them.
func hostNames(v any) error {
	for _, s := range v.([]string) {
		if s == "" || strings.ContainsAny(s, ":/ ") {
			return fmt.Errorf("%q is not a host name (no port, scheme or path)", s)
		}
	}
	return nil
}

func hostPorts(v any) error {
	for _, s := range v.([]string) {
		if err := hostPort(s); err != nil {
			return err
		}
	}
	return nil
}

func nodeLease(v any) error {
	if err := structs.ValidateNodeLease("node_lease", v.(time.Duration)); err != nil {
		return err
	}
	return nil
}

// notNegativeDuration: 0 keeps the default; the bound against the lease
// is the client's (client.Config.validate, naming fence_timeout).
func notNegativeDuration(v any) error {
	if d := v.(time.Duration); d < 0 {
		return fmt.Errorf("must not be negative, got %s", d)
	}
	return nil
}

func notNegative(v any) error {
	if v.(int) < 0 {
		return fmt.Errorf("must not be negative, got %d", v)
	}
	return nil
}

func positive(v any) error {
	switch x := v.(type) {
	case int:
		if x <= 0 {
			return fmt.Errorf("must be at least 1, got %d", x)
		}
	case float64:
		if x <= 0 {
			return fmt.Errorf("must be greater than 0, got %g", x)
		}
	case time.Duration:
		if x <= 0 {
			return fmt.Errorf("must be longer than 0, got %s", x)
		}
	}
	return nil
}

// agentConfigFiles is the agent's view of its -config files: what the
// command line said (which always wins) and the configuration in force,
// so that SIGHUP can tell what changed.
type agentConfigFiles struct {
	paths         []string
	commandLine   agentFlags      // flags as parsed: command line over defaults, no files
	onCommandLine map[string]bool // flags set on the command line
	running       agentFlags      // in force: files and flags (before -dev fills in its own)
}

// loadAgentConfig merges the -config files into f under the flags set on
// the command line. Call it right after fs.Parse.
func loadAgentConfig(fs *flag.FlagSet, f *agentFlags, paths []string) (*agentConfigFiles, error) {
	c := &agentConfigFiles{paths: paths, commandLine: cloneFlags(*f), onCommandLine: map[string]bool{}}
	fs.Visit(func(fl *flag.Flag) { c.onCommandLine[fl.Name] = true })
	cfg, err := loadConfigFiles(paths)
	if err != nil {
		return nil, err
	}
	cfg.apply(f, c.onCommandLine)
	c.running = cloneFlags(*f)
	return c, nil
}

func cloneFlags(f agentFlags) agentFlags {
	f.plugins = slices.Clone(f.plugins)
	return f
}

// reloadTargets are the running parts SIGHUP may change (nil = absent).
type reloadTargets struct {
	logger hclog.Logger // the root logger: SetLevel reaches every named sub-logger
	tls    *tlsutil.Configurator
	srv    *server.Server
}

// reload is SIGHUP: re-read the files, apply what can change safely,
// re-read the TLS files, and log one line saying what was reloaded and
// which changed keys need a restart. Files that do not parse are refused
// whole: the running configuration stays, TLS files included.
func (c *agentConfigFiles) reload(t reloadTargets) {
	cfg, err := loadConfigFiles(c.paths)
	if err != nil {
		t.logger.Error("SIGHUP: configuration refused; keeping the running one", "error", err)
		return
	}
	next := cloneFlags(c.commandLine)
	cfg.apply(&next, c.onCommandLine)

	var reloaded, restart []string
	serverChanged := false
	for _, k := range configKeys {
		if reflect.DeepEqual(k.get(&c.running), k.get(&next)) {
			continue
		}
		if !k.live {
			restart = append(restart, k.path())
			continue
		}
		k.set(&c.running, &next)
		reloaded = append(reloaded, fmt.Sprintf("%s=%v", k.path(), k.get(&next)))
		if k.block == "server" {
			serverChanged = true
		}
	}
	r := &c.running
	// The level first: the lines below are logged at the new one.
	t.logger.SetLevel(hclog.LevelFromString(r.logLevel))
	if serverChanged && t.srv != nil {
		t.srv.SetHeartbeatTTL(r.heartbeatTTL)
		t.srv.SetClaimGCInterval(r.claimGCInterval)
		t.srv.SetReconcileInterval(r.reconcileEvery)
		t.srv.SetReleaseBackoff(r.backoffBase, r.backoffMax)
	}
	kv := []any{}
	if t.tls != nil {
		if err := t.tls.Reload(); err != nil {
			t.logger.Error("SIGHUP: TLS reload failed; keeping the old certificate", "error", err)
		} else {
			reloaded = append(reloaded, "tls files (certificate, key and CA)")
			kv = append(kv, "serial", serialHex(t.tls.Certificate().SerialNumber))
		}
	}
	if len(reloaded) == 0 {
		reloaded = []string{"nothing changed"}
	}
	kv = append([]any{"reloaded", strings.Join(reloaded, ", ")}, kv...)
	if len(restart) > 0 {
		kv = append(kv, "needs_restart", strings.Join(restart, ", "))
	}
	t.logger.Info("SIGHUP: configuration reloaded", kv...)
}

// serialHex is a certificate serial as `openssl x509 -noout -serial`
// prints it (upper-case hex, an even number of digits), so that the
// SIGHUP line can be matched against the file.
func serialHex(n *big.Int) string {
	h := strings.ToUpper(n.Text(16))
	if len(h)%2 == 1 {
		h = "0" + h
	}
	return h
}
