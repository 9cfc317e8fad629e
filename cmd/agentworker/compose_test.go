package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of docker-compose.yml the checks read.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     any               `yaml:"command"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]any    `yaml:"depends_on"`
	} `yaml:"services"`
}

// TestComposeFile checks what `docker compose up` needs without a Docker
// engine: the file parses (anchors and merge keys resolved), one replica
// publishes the page and API while the scalable one publishes nothing, no
// variable is required (the model key is optional), and every variable the
// services pass to agentworker is one it reads.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}

	// ${VAR:?msg} and ${VAR?msg} make compose refuse to start without VAR.
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+)([^}]*)\}`).FindAllStringSubmatch(string(raw), -1) {
		if !strings.HasPrefix(m[2], ":-") && !strings.HasPrefix(m[2], "-") {
			t.Errorf("%s has no default: compose would not start without it", m[0])
		}
	}

	known := map[string]bool{}
	ct := reflect.TypeFor[config]()
	for i := range ct.NumField() {
		known[ct.Field(i).Tag.Get("envconfig")] = true
	}
	var published []string
	for name, svc := range c.Services {
		for dep := range svc.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not defined", name, dep)
			}
		}
		if svc.Image != "agentworker:local" {
			continue
		}
		if svc.Build == nil {
			t.Errorf("service %s runs agentworker:local without building it", name)
		}
		for k := range svc.Environment {
			if !known[k] {
				t.Errorf("service %s sets %s, which agentworker does not read", name, k)
			}
		}
		if !reflect.DeepEqual(svc.Command, []any{"serve"}) {
			continue
		}
		if svc.Environment["OPENAI_API_KEY"] != "${OPENAI_API_KEY:-}" || svc.Environment["OPENAI_BASE_URL"] != "${OPENAI_BASE_URL:-}" {
			t.Errorf("service %s: OPENAI_API_KEY %q, OPENAI_BASE_URL %q; want both optional, empty by default",
				name, svc.Environment["OPENAI_API_KEY"], svc.Environment["OPENAI_BASE_URL"])
		}
		if !strings.HasPrefix(svc.Environment["JWT_SECRET"], "${JWT_SECRET:-") {
			t.Errorf("service %s: JWT_SECRET %q has no default, so the console and /v1 would be off", name, svc.Environment["JWT_SECRET"])
		}
		for _, p := range svc.Ports {
			published = append(published, name+" "+p)
		}
	}
	if !slices.Equal(published, []string{"api 8080:8080"}) {
		t.Errorf("published ports of serve replicas = %v; want the api replica's 8080 only (worker scales)", published)
	}
	if _, ok := c.Services["worker"]; !ok {
		t.Error("no worker service to scale")
	}
}
