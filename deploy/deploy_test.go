package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// root is the module's root, seen from this package's directory.
const root = ".."

// Files under test, relative to this package's directory.
const (
	dashboardFile  = "grafana/airlock-dashboard.json"
	alertsFile     = "prometheus/alerts.yml"
	prometheusFile = "prometheus/prometheus.yml"
	unitFile       = "systemd/airlock.service"
	singleNodeFile = "nats-server.conf"
	accountsFile   = "cluster/accounts.conf"
	operationsDoc  = "../docs/operations.md"
)

// family is one metric family of internal/metrics/names.go.
type family struct {
	// kind is gauge, counter or histogram, as the constant's comment
	// says; empty when it says none.
	kind string
	// labels are the names in the comment's braces; meaningful only when
	// kind is known (then nil means none).
	labels []string
}

var familyComment = regexp.MustCompile(`^(gauge|counter|histogram|summary)\b\s*(?:\{([^}]*)\})?`)

// airlockFamilies reads the metric names declared in
// internal/metrics/names.go: every string constant that starts with
// airlock_, with the kind and labels its line comment gives. The file is
// parsed, not imported.
func airlockFamilies(t *testing.T) map[string]family {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "internal", "metrics", "names.go"), nil, parser.ParseComments)
	require.NoError(t, err)
	out := map[string]family{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				name, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				if !strings.HasPrefix(name, "airlock_") {
					continue
				}
				var fam family
				if vs.Comment != nil {
					if m := familyComment.FindStringSubmatch(strings.TrimSpace(vs.Comment.Text())); m != nil {
						fam.kind = m[1]
						for _, l := range strings.Split(m[2], ",") {
							if l = strings.TrimSpace(l); l != "" {
								fam.labels = append(fam.labels, l)
							}
						}
					}
				}
				assert.NotContains(t, out, name, "declared twice")
				out[name] = fam
			}
		}
	}
	require.NotEmpty(t, out, "no airlock_ metric names in internal/metrics/names.go")
	return out
}

// metricProblems lists what is wrong with the metrics expr reads: a name
// that neither names.go declares nor the pinned exporter list holds, a
// histogram suffix on what is not a histogram, a label matcher the
// metric does not have.
func metricProblems(fams map[string]family, expr string) []string {
	sels, err := selectors(expr)
	if err != nil {
		return []string{err.Error()}
	}
	if len(sels) == 0 {
		return []string{"reads no metric"}
	}
	var probs []string
	for _, s := range sels {
		var allowed []string
		switch {
		case strings.HasPrefix(s.name, "airlock_"):
			fam, suffix, ok := resolveFamily(fams, s.name)
			if !ok {
				probs = append(probs, fmt.Sprintf("%s is not declared in internal/metrics/names.go", s.name))
				continue
			}
			if fam.kind == "" {
				continue // labels unknown
			}
			allowed = slices.Concat(fam.labels, targetLabels)
			if suffix == "_bucket" {
				allowed = append(allowed, "le")
			}
		case natsExporterMetrics[s.name] != nil:
			allowed = slices.Concat(natsExporterMetrics[s.name], targetLabels)
		default:
			if _, ok := prometheusMetrics[s.name]; !ok {
				probs = append(probs, fmt.Sprintf("%s is neither Airlock's nor a pinned prometheus-nats-exporter metric", s.name))
				continue
			}
			allowed = slices.Concat(prometheusMetrics[s.name], targetLabels)
		}
		for _, l := range s.labels {
			if !slices.Contains(allowed, l) {
				probs = append(probs, fmt.Sprintf("%s has no label %q (it has %v)", s.name, l, allowed))
			}
		}
	}
	return probs
}

// resolveFamily finds name's family: itself, or a histogram's series with
// _bucket, _sum or _count.
func resolveFamily(fams map[string]family, name string) (family, string, bool) {
	if fam, ok := fams[name]; ok {
		return fam, "", true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		fam, ok := fams[base]
		if !ok {
			continue
		}
		if fam.kind == "" || fam.kind == "histogram" || (fam.kind == "summary" && suffix != "_bucket") {
			return fam, suffix, true
		}
	}
	return family{}, "", false
}

func TestMetricProblems(t *testing.T) {
	fams := map[string]family{
		"airlock_g":         {kind: "gauge", labels: []string{"state"}},
		"airlock_h_seconds": {kind: "histogram", labels: []string{"tool"}},
		"airlock_c_total":   {kind: "counter"},
		"airlock_unknown":   {},
	}
	tests := []struct {
		name string
		expr string
		want int
	}{
		{"declared gauge with its label", `airlock_g{state="held", instance="x"}`, 0},
		{"histogram bucket with le", `histogram_quantile(0.9, sum by (le) (rate(airlock_h_seconds_bucket{le="1", tool="a"}[5m])))`, 0},
		{"histogram sum and count", `airlock_h_seconds_sum / airlock_h_seconds_count`, 0},
		{"exporter metric", `jetstream_consumer_num_pending{consumer_name="airlock-gate"}`, 0},
		{"family of unknown kind takes any label", `airlock_unknown{anything="x"}`, 0},
		{"undeclared airlock metric", `airlock_nope`, 1},
		{"bucket of a counter", `airlock_c_total_bucket`, 1},
		{"label the gauge lacks", `airlock_g{tool="x"}`, 1},
		{"le on a histogram's count", `airlock_h_seconds_count{le="1"}`, 1},
		{"unknown exporter metric", `jetstream_consumer_whatever`, 1},
		{"exporter label it lacks", `jetstream_stream_total_bytes{consumer_name="x"}`, 1},
		{"no metric at all", `vector(1)`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Len(t, metricProblems(fams, tc.expr), tc.want, tc.expr)
		})
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dsRef          `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int     `json:"id"`
	Type       string  `json:"type"`
	Title      string  `json:"title"`
	Datasource *dsRef  `json:"datasource"`
	Panels     []panel `json:"panels"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	require.NoError(t, dec.Decode(&d))
	return d
}

// labelValues matches a Prometheus variable query label_values(expr, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

func TestDashboard(t *testing.T) {
	fams := airlockFamilies(t)
	d := loadDashboard(t)
	assert.Equal(t, "airlock", d.UID)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)
	assert.LessOrEqual(t, d.SchemaVersion, 41)

	// The data source is a variable, so the dashboard imports anywhere.
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		require.NotNil(t, v.Datasource, v.Name)
		assert.Equal(t, "${datasource}", v.Datasource.UID, v.Name)
		var q struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(v.Query, &q), v.Name)
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %q is not label_values(metric, label)", v.Name, q.Query)
		assert.Empty(t, metricProblems(fams, m[1]), "variable %s", v.Name)
	}
	assert.Equal(t, "datasource", vars["datasource"])
	assert.Equal(t, "query", vars["instance"])

	ids := map[int]string{}
	var exprs []string
	for _, p := range allPanels(d.Panels) {
		assert.NotContains(t, ids, p.ID, "panel id of %q and %q", p.Title, ids[p.ID])
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "panel %d", p.ID)
		assert.True(t, p.GridPos.W > 0 && p.GridPos.X+p.GridPos.W <= 24, "panel %q: gridPos %+v", p.Title, p.GridPos)
		if p.Type == "row" {
			continue
		}
		require.NotNil(t, p.Datasource, p.Title)
		assert.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			if assert.NotNil(t, tg.Datasource, p.Title) {
				assert.Equal(t, "${datasource}", tg.Datasource.UID, p.Title)
			}
			assert.Empty(t, metricProblems(fams, tg.Expr), "panel %q: %s", p.Title, tg.Expr)
			exprs = append(exprs, tg.Expr)
		}
	}

	// What the dashboard is for: each of these is charted somewhere.
	read := map[string]bool{}
	for _, e := range exprs {
		sels, _ := selectors(e)
		for _, s := range sels {
			read[s.name] = true
		}
	}
	for _, name := range []string{
		"airlock_ops", "airlock_decisions_total", "airlock_holds_pending", "airlock_hold_oldest_age_seconds",
		"airlock_hold_resolution_seconds_bucket", "airlock_grant_to_execution_seconds_bucket",
		"airlock_executions_total", "airlock_execution_duration_seconds_bucket", "airlock_projector_lag_messages",
		"airlock_audit_log_leaves", "airlock_audit_checkpoint_age_seconds", "airlock_rejected_total",
		"airlock_jetstream_advisories_total", "airlock_jetstream_max_deliveries_total", "airlock_jetstream_terminated_total",
		"jetstream_stream_total_messages", "jetstream_stream_total_bytes", "jetstream_consumer_num_pending",
		"jetstream_consumer_num_ack_pending", "jetstream_consumer_num_redelivered",
	} {
		assert.True(t, read[name], "no panel charts %s", name)
	}
}

// ruleFile is a Prometheus rule file; unknown fields are refused.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v), path)
}

func TestAlertRules(t *testing.T) {
	fams := airlockFamilies(t)
	var rf ruleFile
	decodeYAML(t, alertsFile, &rf)
	anchors := headingAnchors(t, operationsDoc)
	seen := map[string]bool{}
	n := 0
	for _, g := range rf.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			n++
			require.NotEmpty(t, r.Alert, "group %s: a rule that is not an alert", g.Name)
			assert.False(t, seen[r.Alert], "alert %s twice", r.Alert)
			seen[r.Alert] = true
			assert.True(t, strings.HasPrefix(r.Alert, "Airlock"), r.Alert)
			assert.Empty(t, metricProblems(fams, r.Expr), "alert %s: %s", r.Alert, r.Expr)
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				assert.NoError(t, err, r.Alert)
			}
			assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			for _, a := range []string{"summary", "description", "runbook"} {
				assert.NotEmpty(t, r.Annotations[a], "alert %s: no %s", r.Alert, a)
			}
			doc, anchor, ok := strings.Cut(r.Annotations["runbook"], "#")
			if assert.True(t, ok, "alert %s: runbook without an anchor", r.Alert) {
				assert.Equal(t, "docs/operations.md", doc, r.Alert)
				assert.Contains(t, anchors, anchor, "alert %s: docs/operations.md has no heading #%s", r.Alert, anchor)
			}
		}
	}
	assert.Positive(t, n)
	// The alerts the runbooks are written for.
	for _, a := range []string{
		"AirlockNotReady", "AirlockProjectorLag", "AirlockHoldWaiting", "AirlockAmbiguousOp",
		"AirlockAuditNotVerified", "AirlockCheckpointStale", "AirlockMaxDeliveries", "AirlockTerminated",
	} {
		assert.True(t, seen[a], "no alert %s", a)
	}
}

// headingAnchors returns the GitHub anchors of a Markdown file's headings.
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	fence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, anchor(strings.TrimLeft(line, "# ")))
	}
	require.NoError(t, sc.Err())
	return out
}

// anchor is GitHub's anchor of a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces made hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	assert.Equal(t, "the-audit-gate-refuses-to-start-exit-5", anchor("The audit gate refuses to start (exit 5)"))
	assert.Equal(t, "serve---fsync", anchor("`serve --fsync`"))
}

// scrapeTargets returns each job's metrics path and targets.
func scrapeTargets(t *testing.T) (ruleFiles []string, jobs map[string][]string, paths map[string]string) {
	t.Helper()
	var cfg struct {
		Global        map[string]any `yaml:"global"`
		RuleFiles     []string       `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	decodeYAML(t, prometheusFile, &cfg)
	jobs, paths = map[string][]string{}, map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		paths[sc.JobName] = sc.MetricsPath
		for _, s := range sc.StaticConfigs {
			jobs[sc.JobName] = append(jobs[sc.JobName], s.Targets...)
		}
	}
	return cfg.RuleFiles, jobs, paths
}

func TestPrometheusConfig(t *testing.T) {
	rules, jobs, paths := scrapeTargets(t)
	require.Contains(t, rules, "alerts.yml")
	_, err := os.Stat(filepath.Join(filepath.Dir(prometheusFile), "alerts.yml"))
	require.NoError(t, err)

	// Airlock on the address the unit gives --metrics; the exporter on
	// its default port.
	unit := parseUnit(t)
	metricsAddr := flagValue(unit["Service"]["ExecStart"][0], "metrics")
	require.NotEmpty(t, metricsAddr)
	assert.Equal(t, []string{metricsAddr}, jobs["airlock"])
	assert.Equal(t, "/metrics", paths["airlock"])
	require.Len(t, jobs["nats"], 1)
	_, port, err := net.SplitHostPort(jobs["nats"][0])
	require.NoError(t, err)
	assert.Equal(t, "7777", port)
}
