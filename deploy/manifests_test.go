package deploy

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	yamlv3 "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	fleetManifest   = "kubernetes/whyslow-fleet.yaml"
	sidecarManifest = "kubernetes/vllm-whyslow.yaml"
	sidecarRules    = "prometheus/whyslow-alerts.yml"
)

// doc is one document of a multi-document manifest.
type doc struct {
	file string
	line int // where the document starts
	data []byte
	meta metav1.TypeMeta
	obj  any // the typed object
}

func (d doc) String() string { return fmt.Sprintf("%s:%d: %s", d.file, d.line, d.meta.Kind) }

// newObject returns the real type of apiVersion/kind, or nil.
func newObject(m metav1.TypeMeta) any {
	switch m.APIVersion + "/" + m.Kind {
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Service":
		return &corev1.Service{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}
	}
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits data at "---" lines, dropping documents that hold only
// comments.
func splitDocs(file string, data []byte) []doc {
	var out []doc
	line := 1
	for _, part := range docSep.Split(string(data), -1) {
		start := line
		line += strings.Count(part, "\n")
		var v any
		if yaml.Unmarshal([]byte(part), &v) == nil && v == nil {
			continue
		}
		// A document starts after its separator's line break.
		lead := len(part) - len(strings.TrimLeft(part, "\n"))
		out = append(out, doc{file: file, line: start + lead, data: []byte(part)})
	}
	return out
}

// decodeManifest decodes every document of file strictly into its real
// type: an unknown or misspelled field, a duplicate key or a wrong type is
// an error, as `kubectl apply --validate=strict` would make it.
func decodeManifest(file string, data []byte) ([]doc, []error) {
	var errs []error
	docs := splitDocs(file, data)
	for i := range docs {
		d := &docs[i]
		if err := yaml.Unmarshal(d.data, &d.meta); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", file, d.line, err))
			continue
		}
		d.obj = newObject(d.meta)
		if d.obj == nil {
			errs = append(errs, fmt.Errorf("%s: apiVersion %q kind %q is not a type this test knows", d, d.meta.APIVersion, d.meta.Kind))
			continue
		}
		if err := yaml.UnmarshalStrict(d.data, d.obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	return docs, errs
}

func loadManifest(t *testing.T, file string) []doc {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, errs := decodeManifest(file, data)
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return docs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	for _, file := range []string{fleetManifest, sidecarManifest} {
		t.Run(file, func(t *testing.T) {
			if docs := loadManifest(t, file); len(docs) < 4 {
				t.Errorf("%d documents, want at least 4", len(docs))
			}
		})
	}
}

// Strict decoding rejects what a lenient one would drop.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	for name, src := range map[string]string{
		"misspelled field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"nested unknown":   "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints:\n    - port: http\n      honourLabels: true\n",
		"wrong type":       "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: http}]\n",
		"duplicate key":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"unknown kind":     "apiVersion: v1\nkind: Pod2\nmetadata: {name: x}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, errs := decodeManifest("test.yaml", []byte(src)); len(errs) == 0 {
				t.Errorf("accepted:\n%s", src)
			}
		})
	}
}

// fleet is the fleet manifest's objects.
type fleet struct {
	secret  *corev1.Secret
	config  *corev1.ConfigMap
	deploy  *appsv1.Deployment
	pdb     *policyv1.PodDisruptionBudget
	service *corev1.Service
	monitor *monitoringv1.ServiceMonitor
	rule    *monitoringv1.PrometheusRule
}

func loadFleet(t *testing.T) fleet {
	t.Helper()
	var f fleet
	for _, d := range loadManifest(t, fleetManifest) {
		switch o := d.obj.(type) {
		case *corev1.Secret:
			f.secret = o
		case *corev1.ConfigMap:
			f.config = o
		case *appsv1.Deployment:
			f.deploy = o
		case *policyv1.PodDisruptionBudget:
			f.pdb = o
		case *corev1.Service:
			f.service = o
		case *monitoringv1.ServiceMonitor:
			f.monitor = o
		case *monitoringv1.PrometheusRule:
			f.rule = o
		}
	}
	if f.secret == nil || f.config == nil || f.deploy == nil || f.pdb == nil || f.service == nil || f.monitor == nil || f.rule == nil {
		t.Fatalf("%s: want a Secret, ConfigMap, Deployment, PodDisruptionBudget, Service, ServiceMonitor and PrometheusRule", fleetManifest)
	}
	return f
}

// selects reports whether selector matches labels exactly as Kubernetes
// matchLabels does.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The objects of the fleet manifest refer to each other correctly: what a
// strict decode cannot see.
func TestFleetManifestWiring(t *testing.T) {
	f := loadFleet(t)
	ns := f.deploy.Namespace
	for _, m := range []metav1.ObjectMeta{f.secret.ObjectMeta, f.config.ObjectMeta, f.pdb.ObjectMeta, f.service.ObjectMeta, f.monitor.ObjectMeta, f.rule.ObjectMeta} {
		if m.Namespace != ns {
			t.Errorf("%s is in namespace %q, the Deployment in %q", m.Name, m.Namespace, ns)
		}
	}

	spec := f.deploy.Spec
	if spec.Replicas == nil || *spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", spec.Replicas)
	}
	pod := spec.Template.Labels
	if spec.Selector == nil || !selects(spec.Selector.MatchLabels, pod) {
		t.Errorf("Deployment selector does not match its pod labels %v", pod)
	}
	if f.pdb.Spec.Selector == nil || !selects(f.pdb.Spec.Selector.MatchLabels, pod) {
		t.Errorf("PodDisruptionBudget does not select the pods")
	}
	if !selects(f.service.Spec.Selector, pod) {
		t.Errorf("Service selector %v does not match the pods %v", f.service.Spec.Selector, pod)
	}
	if len(spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Template.Spec.Containers))
	}
	c := spec.Template.Spec.Containers[0]

	// Ports: container, probes, Service, ServiceMonitor all name http-metrics.
	var port corev1.ContainerPort
	for _, p := range c.Ports {
		if p.Name == "http-metrics" {
			port = p
		}
	}
	if port.ContainerPort != 9109 {
		t.Fatalf("container has no port http-metrics on 9109: %v", c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != port.Name {
			t.Errorf("%s probe does not use port %s", name, port.Name)
		}
	}
	if len(f.service.Spec.Ports) != 1 || f.service.Spec.Ports[0].Name != "http-metrics" || f.service.Spec.Ports[0].Port != 9109 ||
		f.service.Spec.Ports[0].TargetPort.String() != port.Name {
		t.Errorf("Service ports = %+v, want http-metrics 9109 → %s", f.service.Spec.Ports, port.Name)
	}
	if !selects(f.monitor.Spec.Selector.MatchLabels, f.service.Labels) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", f.monitor.Spec.Selector.MatchLabels, f.service.Labels)
	}
	if len(f.monitor.Spec.Endpoints) != 1 || f.monitor.Spec.Endpoints[0].Port != "http-metrics" || !f.monitor.Spec.Endpoints[0].HonorLabels {
		t.Errorf("ServiceMonitor endpoints = %+v, want port http-metrics with honorLabels", f.monitor.Spec.Endpoints)
	}

	// Config: mounted from the ConfigMap; stateless (no data dir, no
	// volume besides the config).
	var cfgVol string
	for _, v := range spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != f.config.Name {
			t.Errorf("volume %s is not the config: replicas keep no state on disk", v.Name)
			continue
		}
		cfgVol = v.Name
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == cfgVol && strings.Contains(strings.Join(c.Args, " "), m.MountPath+"/whyslow.yml") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the ConfigMap's whyslow.yml is not what --config reads (args %v, mounts %v)", c.Args, c.VolumeMounts)
	}

	// Env: every secretKeyRef exists in the Secret.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if _, ok := f.secret.StringData[ref.Key]; ref.Name != f.secret.Name || !ok {
			t.Errorf("env %s refers to secret %s key %s, which the manifest does not hold", e.Name, ref.Name, ref.Key)
		}
	}
	checkFleetConfig(t, f.config.Data["whyslow.yml"], env)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// checkFleetConfig checks the ConfigMap's config: the keys of a fleet
// daemon, the listen port the manifest exposes, and a container env
// variable for every ${VAR} without a default (the daemon expands them in
// values, not in comments).
func checkFleetConfig(t *testing.T, text string, env map[string]bool) {
	t.Helper()
	var root yamlv3.Node
	if err := yamlv3.Unmarshal([]byte(text), &root); err != nil || len(root.Content) == 0 {
		t.Fatalf("whyslow.yml does not parse: %v", err)
	}
	var walk func(n *yamlv3.Node)
	walk = func(n *yamlv3.Node) {
		if n.Kind == yamlv3.ScalarNode {
			for _, m := range envRef.FindAllStringSubmatch(n.Value, -1) {
				if m[2] == "" && !env[m[1]] {
					t.Errorf("whyslow.yml line %d uses ${%s}, which the container's env does not set", n.Line, m[1])
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)

	var cfg struct {
		Listen  string `yaml:"listen"`
		DataDir string `yaml:"data_dir"`
		Source  struct {
			Prometheus struct {
				URL string `yaml:"url"`
			} `yaml:"prometheus"`
		} `yaml:"source"`
		Detect struct {
			GroupBy []string `yaml:"group_by"`
		} `yaml:"detect"`
		Receivers []struct {
			Name         string `yaml:"name"`
			Alertmanager *struct {
				URL string `yaml:"url"`
			} `yaml:"alertmanager"`
		} `yaml:"receivers"`
	}
	if err := root.Decode(&cfg); err != nil {
		t.Fatalf("whyslow.yml: %v", err)
	}
	if !strings.HasSuffix(cfg.Listen, ":9109") {
		t.Errorf("listen = %q, want the exposed port 9109", cfg.Listen)
	}
	if cfg.DataDir != "" {
		t.Errorf("data_dir = %q: the HA replicas keep their state in memory", cfg.DataDir)
	}
	if cfg.Source.Prometheus.URL == "" {
		t.Errorf("no source.prometheus.url: not a fleet daemon")
	}
	if strings.Join(cfg.Detect.GroupBy, ",") != "namespace,model_name" {
		t.Errorf("detect.group_by = %v, want [namespace model_name] (the dashboard's variables)", cfg.Detect.GroupBy)
	}
	if len(cfg.Receivers) == 0 || cfg.Receivers[0].Alertmanager == nil || cfg.Receivers[0].Alertmanager.URL == "" {
		t.Errorf("receivers = %+v, want an alertmanager receiver", cfg.Receivers)
	}
}

// The PrometheusRule loads as Prometheus would load it (rulefmt: the
// expressions parse, the templates render, for/labels are valid), reads
// only metrics someone exports, and selects whyslow's own series by the
// job the ServiceMonitor gives them (the Service's name).
func TestFleetAlertRules(t *testing.T) {
	f := loadFleet(t)
	k := exported(t)
	groups, err := yaml.Marshal(map[string]any{"groups": f.rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	checkRuleFile(t, fleetManifest+" (PrometheusRule)", groups)

	job := f.service.Name
	alerts := map[string]bool{}
	for _, g := range f.rule.Spec.Groups {
		for i, r := range g.Rules {
			where := fmt.Sprintf("%s: group %q, rule %d (%s)", fleetManifest, g.Name, i+1, r.Alert)
			alerts[r.Alert] = true
			expr := r.Expr.String()
			for _, p := range checkExpr(k, expr) {
				t.Errorf("%s: %s", where, p)
			}
			e, err := promql.ParseExpr(expr)
			if err != nil {
				continue
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				var jobOK bool
				for _, m := range vs.LabelMatchers {
					jobOK = jobOK || (m.Name == "job" && m.Matches(job))
				}
				if !jobOK {
					t.Errorf("%s: %s does not select job=%q: it would also match other whyslow deployments", where, vs, job)
				}
				return nil
			})
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: want a severity label and a summary annotation", where)
			}
		}
	}
	for _, want := range []string{"WhyslowDown", "WhyslowDetectFailing", "WhyslowAlertmanagerSendFailing", "WhyslowCycleOverBudget", "WhyslowCycleBounded"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// The sidecar's Prometheus rule file loads too.
func TestSidecarAlertRules(t *testing.T) {
	b, err := os.ReadFile(sidecarRules)
	if err != nil {
		t.Fatal(err)
	}
	checkRuleFile(t, sidecarRules, b)
}

func checkRuleFile(t *testing.T, name string, content []byte) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	rgs, errs := rulefmt.Parse(content, false, model.LegacyValidation, promql, log)
	for _, err := range errs {
		t.Errorf("%s: %v", name, err)
	}
	if len(errs) == 0 && (rgs == nil || len(rgs.Groups) == 0) {
		t.Errorf("%s: no rule groups", name)
	}
	n := 0
	if rgs != nil {
		for _, g := range rgs.Groups {
			n += len(g.Rules)
		}
	}
	t.Logf("%s: %s rules", name, strconv.Itoa(n))
}
