package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	yamlv3 "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The sidecar manifest deploys (issue 25 item 10): Prometheus scrapes the
// engine as well as whyslow (the dashboard reads vllm:*), the config's
// ${VAR}s are in the container's env, and the image is the one the README
// builds and pushes.
func TestSidecarManifestWiring(t *testing.T) {
	var (
		deploy  *appsv1.Deployment
		service *corev1.Service
		config  *corev1.ConfigMap
		monitor *monitoringv1.ServiceMonitor
	)
	for _, d := range loadManifest(t, sidecarManifest) {
		switch o := d.obj.(type) {
		case *appsv1.Deployment:
			deploy = o
		case *corev1.Service:
			service = o
		case *corev1.ConfigMap:
			config = o
		case *monitoringv1.ServiceMonitor:
			monitor = o
		}
	}
	if deploy == nil || service == nil || config == nil || monitor == nil {
		t.Fatalf("%s: want a Deployment, Service, ConfigMap and ServiceMonitor", sidecarManifest)
	}
	containers := map[string]corev1.Container{}
	ports := map[string]int32{} // container port name → number
	for _, c := range deploy.Spec.Template.Spec.Containers {
		containers[c.Name] = c
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	engine, whyslow := containers["vllm"], containers["whyslow"]
	if len(engine.Ports) == 0 || len(whyslow.Ports) == 0 {
		t.Fatalf("containers %v: want vllm and whyslow, each with a port", containers)
	}

	// The ServiceMonitor scrapes both containers through the Service.
	if !selects(monitor.Spec.Selector.MatchLabels, service.Labels) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", monitor.Spec.Selector.MatchLabels, service.Labels)
	}
	servicePorts := map[string]string{} // Service port name → container port name
	for _, p := range service.Spec.Ports {
		servicePorts[p.Name] = p.TargetPort.String()
	}
	scraped := map[string]bool{} // container port name
	for _, e := range monitor.Spec.Endpoints {
		target, ok := servicePorts[e.Port]
		if !ok || ports[target] == 0 {
			t.Errorf("ServiceMonitor endpoint port %q is no Service port reaching a container port", e.Port)
		}
		scraped[target] = true
	}
	for _, c := range []corev1.Container{engine, whyslow} {
		if !scraped[c.Ports[0].Name] {
			t.Errorf("nothing scrapes container %s (port %s)", c.Name, c.Ports[0].Name)
		}
	}
	// whyslow's series get the job the sidecar alert rules select.
	rules, err := os.ReadFile(sidecarRules)
	if err != nil {
		t.Fatal(err)
	}
	job := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindStringSubmatch(string(rules))
	relabeled := false
	for _, e := range monitor.Spec.Endpoints {
		if servicePorts[e.Port] != whyslow.Ports[0].Name {
			continue
		}
		for _, r := range e.RelabelConfigs {
			relabeled = relabeled || job != nil && r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == job[1]
		}
	}
	if !relabeled {
		t.Errorf("whyslow's endpoint does not set the job %v that %s selects", job, sidecarRules)
	}

	// The config scrapes the engine container, publishes verdict links,
	// and every ${VAR} without a default is in whyslow's env.
	text := config.Data["whyslow.yml"]
	var cfg struct {
		EngineURLs []string `yaml:"engine_urls"`
		API        struct {
			ExternalURL string `yaml:"external_url"`
		} `yaml:"api"`
	}
	if err := yamlv3.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.EngineURLs) != 1 || !strings.Contains(cfg.EngineURLs[0], ":"+strconv.Itoa(int(engine.Ports[0].ContainerPort))+"/") {
		t.Errorf("engine_urls %v do not reach the engine's port %d", cfg.EngineURLs, engine.Ports[0].ContainerPort)
	}
	if cfg.API.ExternalURL == "" {
		t.Error("no api.external_url: notifications and the dashboard have no verdict link")
	}
	env := map[string]bool{}
	for _, e := range whyslow.Env {
		env[e.Name] = true
	}
	for _, m := range envRef.FindAllStringSubmatch(text, -1) {
		if m[2] == "" && !env[m[1]] {
			t.Errorf("whyslow.yml uses ${%s}, which the container's env does not set", m[1])
		}
	}

	// Both manifests run the image the README builds and pushes.
	fleet := loadFleet(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	pushed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^docker push (\S+)`).FindAllStringSubmatch(string(readme), -1) {
		pushed[m[1]] = true
	}
	for file, image := range map[string]string{sidecarManifest: whyslow.Image, fleetManifest: fleet.deploy.Spec.Template.Spec.Containers[0].Image} {
		if !pushed[image] {
			t.Errorf("%s runs image %q, which no `docker push` of the README publishes (pushed: %v)", file, image, pushed)
		}
	}
}
