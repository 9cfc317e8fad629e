package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
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
		Image       string             `yaml:"image"`
		Build       any                `yaml:"build"`
		Command     any                `yaml:"command"`
		Ports       []string           `yaml:"ports"`
		Environment map[string]*string `yaml:"environment"`
		DependsOn   map[string]any     `yaml:"depends_on"`
		Restart     string             `yaml:"restart"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) (composeFile, []byte) {
	t.Helper()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	return c, raw
}

// TestComposeFile checks what `docker compose up` needs without a Docker
// engine: the file parses (anchors and merge keys resolved), one replica
// publishes the page and API while the scalable one publishes nothing, no
// variable is required (the model key is optional), and every variable the
// services pass to agentworker is one it reads.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	c, raw := readCompose(t)

	// ${VAR:?msg} and ${VAR?msg} make compose refuse to start without VAR;
	// an empty default (${VAR:-}) is passed on literally by podman-compose
	// 1.0.3, which substitutes non-empty defaults only.
	for _, m := range regexp.MustCompile(`\$\{([A-Z0-9_]+)([^}]*)\}`).FindAllStringSubmatch(string(raw), -1) {
		def, ok := strings.CutPrefix(m[2], ":-")
		if !ok {
			def, ok = strings.CutPrefix(m[2], "-")
		}
		if !ok || def == "" {
			t.Errorf("%s has no non-empty default: compose would not start without it, or podman-compose would pass it on as it is", m[0])
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
		// A variable without a value is passed on from the shell when set
		// there, and left unset otherwise.
		for _, k := range []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"} {
			if v, ok := svc.Environment[k]; !ok || v != nil {
				got := "absent"
				if v != nil {
					got = strconv.Quote(*v)
				}
				t.Errorf("service %s: %s is %s; want it passed on from the shell (no value), unset by default", name, k, got)
			}
		}
		if jwt := svc.Environment["JWT_SECRET"]; jwt == nil || !strings.HasPrefix(*jwt, "${JWT_SECRET:-") {
			t.Errorf("service %s: JWT_SECRET has no default, so the console and /v1 would be off", name)
		}
		for _, p := range svc.Ports {
			published = append(published, name+" "+p)
		}
	}
	if !slices.Equal(published, []string{"api ${AGENTWORKER_PORT:-8080}:8080"}) {
		t.Errorf("published ports of serve replicas = %v; want the api replica's 8080 only (worker scales)", published)
	}
	if _, ok := c.Services["worker"]; !ok {
		t.Error("no worker service to scale")
	}
}

// TestComposeStartsWithoutConditions: start-up holds where depends_on
// conditions are ignored (podman-compose) and healthchecks do not run:
// every service restarts after a failure, the one-shot migrate until it
// succeeds; the serve replicas have a healthcheck (the binary's own, the
// image has no curl); no service takes a host's Postgres port.
func TestComposeStartsWithoutConditions(t *testing.T) {
	t.Parallel()
	c, _ := readCompose(t)
	for name, svc := range c.Services {
		oneShot := name == "migrate"
		if want := map[bool]string{true: "on-failure", false: "unless-stopped"}[oneShot]; svc.Restart != want {
			t.Errorf("service %s: restart %q, want %q", name, svc.Restart, want)
		}
		for _, p := range svc.Ports {
			if host, _, _ := strings.Cut(p, ":"); host == "5432" {
				t.Errorf("service %s publishes %s: it collides with a Postgres on the host", name, p)
			}
		}
		if !reflect.DeepEqual(svc.Command, []any{"serve"}) {
			continue
		}
		if want := []string{"CMD", "agentworker", "healthcheck"}; !slices.Equal(svc.Healthcheck.Test, want) {
			t.Errorf("service %s: healthcheck %q, want %q", name, svc.Healthcheck.Test, want)
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "\n  healthcheck ") {
		t.Errorf("agentworker has no healthcheck command: %v\n%s", err, out.String())
	}
}

// namespaceSyscalls are what bubblewrap needs beyond Docker's default
// profile, which allows them only with CAP_SYS_ADMIN: making its user,
// mount, pid, network, ipc and uts namespaces (clone, unshare), building
// the sandbox's root (mount, pivot_root, umount2) and naming its host.
var namespaceSyscalls = []string{"clone", "unshare", "mount", "umount2", "pivot_root", "sethostname"}

// composeSecurityOpt is what the serve replicas need for run_command's
// sandbox: the seccomp profile that lets bubblewrap make its namespaces,
// and /proc without the runtime's masks, without which the kernel refuses
// bubblewrap's fresh /proc (Docker and Podman both take systempaths).
var composeSecurityOpt = []string{"seccomp=deploy/seccomp.json", "systempaths=unconfined"}

// TestComposeSeccompProfile: deploy/seccomp.json is Docker's default
// profile with one rule added, the calls bubblewrap needs; the serve
// services run under it and composeSecurityOpt, as the image's non-root
// user, with no added capability and not privileged. -update rewrites it.
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
			User        string   `yaml:"user"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for name, svc := range c.Services {
		if !reflect.DeepEqual(svc.Command, []any{"serve"}) {
			continue
		}
		if !slices.Equal(svc.SecurityOpt, composeSecurityOpt) || svc.Privileged || len(svc.CapAdd) > 0 || svc.User != "" {
			t.Errorf("service %s: security_opt %v, privileged %v, cap_add %v, user %q; want %v only, as the image's user",
				name, svc.SecurityOpt, svc.Privileged, svc.CapAdd, svc.User, composeSecurityOpt)
		}
	}
}

// dockerfileStage is one FROM of the Dockerfile: its image, the build
// arguments' defaults substituted, and its instructions.
type dockerfileStage struct {
	from, body string
}

func readDockerfile(t *testing.T) []dockerfileStage {
	t.Helper()
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	parts := regexp.MustCompile(`(?m)^FROM `).Split(string(raw), -1)
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG ([A-Z_]+)=(\S+)$`).FindAllStringSubmatch(parts[0], -1) {
		args[m[1]] = m[2]
	}
	var stages []dockerfileStage
	for _, p := range parts[1:] {
		from, body, _ := strings.Cut(p, "\n")
		from = strings.Fields(from)[0]
		if name, ok := strings.CutPrefix(from, "${"); ok {
			from = args[strings.TrimSuffix(name, "}")]
		}
		stages = append(stages, dockerfileStage{from: from, body: body})
	}
	return stages
}

// TestDockerfileRuntimeHasTheSandbox: the image's runtime stage installs
// every package the sandbox needs, each pinned to a version, runs as a
// user other than root, and under tini, which reaps the sandbox's orphaned
// processes (the binary would be PID 1 otherwise, and reaps none).
func TestDockerfileRuntimeHasTheSandbox(t *testing.T) {
	t.Parallel()
	stages := readDockerfile(t)
	runtime := stages[len(stages)-1]
	if runtime.from != "debian:bookworm-slim" {
		t.Fatalf("the runtime stage is FROM %q, want Debian bookworm (the packages are Debian's)", runtime.from)
	}
	pinned := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+([a-z0-9.+-]+)=(\S+) \\$`).FindAllStringSubmatch(runtime.body, -1) {
		pinned[m[1]] = m[2]
	}
	for program, pkg := range sandbox.Packages() {
		if pinned[pkg] == "" {
			t.Errorf("the runtime stage does not install %s (for %s) pinned to a version; it installs %v", pkg, program, pinned)
		}
	}
	for pkg, why := range map[string]string{"ca-certificates": "installs reach the registry over TLS", "tini": "it is PID 1"} {
		if pinned[pkg] == "" {
			t.Errorf("the runtime stage does not install %s pinned to a version: %s", pkg, why)
		}
	}
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(runtime.body)
	if user == nil || strings.HasPrefix(user[1], "0") || strings.HasPrefix(user[1], "root") {
		t.Errorf("the runtime stage runs as %v, want a user other than root", user)
	}
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT (.+)$`).FindStringSubmatch(runtime.body)
	if entry == nil || entry[1] != `["/usr/bin/tini", "--", "/usr/local/bin/agentworker"]` {
		t.Errorf("the entrypoint is %v, want agentworker under tini", entry)
	}
}

// TestDockerfileBuild: the build stage uses the Go of go.mod (its minor
// release: the image tags name no patch release), builds a stripped binary
// without the build machine's paths, and keeps Go's module and build caches
// in cache mounts, so only a first build compiles every dependency.
func TestDockerfileBuild(t *testing.T) {
	t.Parallel()
	build := readDockerfile(t)[0]
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVersion == nil || build.from != "golang:"+string(goVersion[1])+"-bookworm" {
		t.Errorf("the build stage is FROM %q; want golang:%s-bookworm, go.mod's Go", build.from, goVersion)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ENV (.+)$`).FindAllStringSubmatch(build.body, -1) {
		for _, kv := range strings.Fields(m[1]) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	run := regexp.MustCompile(`(?ms)^RUN (.*?[^\\])$`).FindAllStringSubmatch(build.body, -1)
	var goBuild string
	for _, r := range run {
		if strings.Contains(r[1], "go build") {
			goBuild = r[1]
		}
	}
	if env["GOMODCACHE"] == "" || env["GOCACHE"] == "" {
		t.Errorf("the build stage sets GOMODCACHE %q and GOCACHE %q; want both, the targets of its cache mounts", env["GOMODCACHE"], env["GOCACHE"])
	}
	for _, want := range []string{`-trimpath`, `-ldflags="-s -w"`,
		"--mount=type=cache,id=agentworker-gomod,target=" + env["GOMODCACHE"],
		"--mount=type=cache,id=agentworker-gobuild,target=" + env["GOCACHE"]} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("the go build step lacks %s:\n%s", want, goBuild)
		}
	}
}

// TestDockerignore: the build context holds what the binary is built from
// (every package it imports, and what they embed) and leaves out the rest
// the issue named: history, tests, documentation.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var ignored []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			ignored = append(ignored, strings.TrimPrefix(line, "/"))
		}
	}
	for _, want := range []string{".git", "testing", "docs", "**/*_test.go"} {
		if !slices.Contains(ignored, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
	// A path is left out when a pattern matches it or a folder above it;
	// ** matches any number of folders.
	excluded := func(p string) string {
		for _, pat := range ignored {
			for dir := p; dir != "."; dir = path.Dir(dir) {
				if ok, _ := path.Match(pat, dir); ok {
					return pat
				}
				if rest, ok := strings.CutPrefix(pat, "**/"); ok {
					if ok, _ := path.Match(rest, path.Base(dir)); ok {
						return pat
					}
				}
			}
		}
		return ""
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(root, fields[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a module from the module cache
		}
		for _, f := range fields[1:] {
			if pat := excluded(filepath.ToSlash(filepath.Join(rel, f))); pat != "" {
				t.Errorf(".dockerignore's %s leaves out %s, which the binary is built from", pat, filepath.Join(rel, f))
			}
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if pat := excluded(f); pat != "" {
			t.Errorf(".dockerignore's %s leaves out %s", pat, f)
		}
	}
}
