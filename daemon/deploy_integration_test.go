package daemon

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDeployAlertRules validates deploy/prometheus/whyslow-alerts.yml with
// promtool and runs its unit tests (whyslow-alerts_test.yml).
func TestDeployAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	path := filepath.Join("..", "deploy", "prometheus", "whyslow-alerts.yml")
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", path, err, out)
	}
	tests := filepath.Join("..", "deploy", "prometheus", "whyslow-alerts_test.yml")
	if out, err := exec.Command(promtool, "test", "rules", tests).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", tests, err, out)
	}
}
