package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.yaml.in/yaml/v3"

	"github.com/agentworker/agentworker/sandbox"
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

// namespaceSyscalls are what bubblewrap needs beyond Docker's default
// profile, which allows them only with CAP_SYS_ADMIN: making its user,
// mount, pid, network, ipc and uts namespaces (clone, unshare), building
// the sandbox's root (mount, pivot_root, umount2) and naming its host.
var namespaceSyscalls = []string{"clone", "unshare", "mount", "umount2", "pivot_root", "sethostname"}

// TestComposeSeccompProfile: deploy/seccomp.json is Docker's default
// profile with one rule added, the calls bubblewrap needs; the serve
// services run under it, with no added capability and not privileged.
// -update rewrites it.
func TestComposeSeccompProfile(t *testing.T) {
	t.Parallel()
	profile := mobyseccomp.DefaultProfile()
	profile.Syscalls = append(profile.Syscalls, &mobyseccomp.Syscall{
		LinuxSyscall: specs.LinuxSyscall{Names: namespaceSyscalls, Action: specs.ActAllow},
		Comment:      "agentworker: bubblewrap makes the user namespaces of run_command's sandbox without CAP_SYS_ADMIN",
	})
	want, err := json.MarshalIndent(profile, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "../../deploy/seccomp.json"
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not Docker's default profile plus %v: run go test ./cmd/agentworker -run TestComposeSeccompProfile -update", path, namespaceSyscalls)
	}

	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     any      `yaml:"command"`
			SecurityOpt []string `yaml:"security_opt"`
			Privileged  bool     `yaml:"privileged"`
			CapAdd      []string `yaml:"cap_add"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for name, svc := range c.Services {
		if !reflect.DeepEqual(svc.Command, []any{"serve"}) {
			continue
		}
		if !slices.Equal(svc.SecurityOpt, []string{"seccomp=deploy/seccomp.json"}) || svc.Privileged || len(svc.CapAdd) > 0 {
			t.Errorf("service %s: security_opt %v, privileged %v, cap_add %v; want the profile only", name, svc.SecurityOpt, svc.Privileged, svc.CapAdd)
		}
	}
}

// TestDockerfileRuntimeHasTheSandbox: the image's runtime stage installs
// every package the sandbox needs, each pinned to a version, and runs as a
// user other than root.
func TestDockerfileRuntimeHasTheSandbox(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM `).Split(string(raw), -1)
	runtime := stages[len(stages)-1]
	if !strings.HasPrefix(runtime, "debian:bookworm-slim") {
		t.Fatalf("the runtime stage is %q, want Debian bookworm (the packages are Debian's)", strings.SplitN(runtime, "\n", 2)[0])
	}
	pinned := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+([a-z0-9.+-]+)=(\S+) \\$`).FindAllStringSubmatch(runtime, -1) {
		pinned[m[1]] = m[2]
	}
	for program, pkg := range sandbox.Packages() {
		if pinned[pkg] == "" {
			t.Errorf("the runtime stage does not install %s (for %s) pinned to a version; it installs %v", pkg, program, pinned)
		}
	}
	if pinned["ca-certificates"] == "" {
		t.Error("the runtime stage does not install ca-certificates: installs reach the registry over TLS")
	}
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(runtime)
	if user == nil || strings.HasPrefix(user[1], "0") || strings.HasPrefix(user[1], "root") {
		t.Errorf("the runtime stage runs as %v, want a user other than root", user)
	}
}
