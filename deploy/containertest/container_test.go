// Package containertest runs the agentworker image as its users run it,
// with podman: the image alone against this machine's Postgres, MinIO and a
// scripted model (migrate, serve, a build whose command runs in the
// container's sandbox, SIGTERM with a task in flight), and
// docker-compose.yml itself up to a task that succeeds through its api
// service. scripts/container builds the image and runs these tests; without
// -container.image they skip.
package containertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/llm"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/testing/s3test"
)

var (
	image         = flag.String("container.image", "", "the agentworker image to run (scripts/container builds it); empty: the tests skip")
	postgresImage = flag.String("container.postgres-image", "", "the image compose's postgres service runs instead of its own (a stand-in where no registry answers)")
	minioImage    = flag.String("container.minio-image", "", "the image compose's minio service runs instead of its own")
)

func TestMain(m *testing.M) { dbtest.Main(m, s3test.LeakOption()) }

// securityOpt is what docker-compose.yml gives the serve replicas (and
// docs/operations.md tells users of `docker run`): the seccomp profile that
// lets bubblewrap make its namespaces, and /proc without the runtime's
// masks, so that bubblewrap may mount its own.
var securityOpt = []string{"--security-opt", "seccomp=" + repoPath("deploy/seccomp.json"), "--security-opt", "systempaths=unconfined"}

func repoPath(p string) string {
	abs, err := filepath.Abs(filepath.Join("../..", p))
	if err != nil {
		panic(err)
	}
	return abs
}

func requireImage(t *testing.T) {
	t.Helper()
	if *image == "" {
		t.Skip("the container tests run from scripts/container, which builds the image: -container.image is not set")
	}
}

// podman runs podman and returns its standard output; it fails the test
// with standard error when podman fails.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runPodman(t.Context(), args...)
	if err != nil {
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func runPodman(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// sandboxModel is a scripted model for build tasks whose prompt holds a
// key of scripts: it writes a package.json whose build script is that
// key's command, runs it with run_command, and finishes. It keeps what each
// command printed, as the model read it, by key.
type sandboxModel struct {
	scripts map[string]string // prompt's key → the build script's shell command

	mu      sync.Mutex
	outputs map[string]map[string]any
	started map[string]chan struct{} // closed when the prompt's command is handed out
}

func newSandboxModel(scripts map[string]string) *sandboxModel {
	m := &sandboxModel{scripts: scripts, outputs: map[string]map[string]any{}, started: map[string]chan struct{}{}}
	for p := range scripts {
		m.started[p] = make(chan struct{})
	}
	return m
}

func (m *sandboxModel) Respond(req *scripted.Request) scripted.Reply {
	last, prompt := req.LastUserMessage()
	var name string
	for p := range m.scripts {
		if strings.Contains(prompt, p) {
			name = p
		}
	}
	if name == "" {
		return scripted.Reply{Status: http.StatusBadRequest}
	}
	var results []llm.Message
	for _, msg := range req.Messages[last+1:] {
		if msg.Role == llm.RoleTool {
			results = append(results, msg)
		}
	}
	switch len(results) {
	case 0:
		pkg, _ := json.Marshal(map[string]any{"name": name, "private": true, "scripts": map[string]string{"build": m.scripts[name]}})
		return llmtest.Call("write_file", map[string]string{"path": "package.json", "content": string(pkg)})
	case 1:
		m.mu.Lock()
		close(m.started[name])
		m.mu.Unlock()
		return llmtest.Call("run_command", map[string]any{"command": "npm_build"})
	case 2:
		var out map[string]any
		_ = json.Unmarshal([]byte(results[1].Content), &out)
		m.mu.Lock()
		m.outputs[name] = out
		m.mu.Unlock()
		return llmtest.Call("finish", map[string]string{"summary": "ran " + name})
	default:
		return llmtest.Text("done")
	}
}

func (m *sandboxModel) output(name string) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.outputs[name]
}

// insertBuild inserts a build task by plain SQL, as any app would.
func insertBuild(t *testing.T, db *pgx.Conn, prompt string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := db.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', $2) RETURNING id`,
		uuid.New(), prompt).Scan(&id); err != nil {
		t.Fatalf("insert task: %v", err)
	}
	return id
}

func taskStatus(t *testing.T, db *pgx.Conn, id uuid.UUID) string {
	t.Helper()
	var status string
	if err := db.QueryRow(t.Context(), `SELECT status FROM ai_tasks WHERE id = $1`, id).Scan(&status); err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	return status
}

// waitReady polls /readyz until it answers 200 and returns its body.
func waitReady(t *testing.T, base string, d time.Duration, logs func() string) string {
	t.Helper()
	var body string
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
			body = resp.Status + " " + string(b)
		} else {
			body = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz not ready after %s (%s); logs:\n%s", base, d, body, logs())
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// zombies lists the container's processes that exited and were not reaped.
func zombies(t *testing.T, name string) []string {
	t.Helper()
	out := podman(t, "exec", name, "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null")
	var z []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// pid (comm) state …: comm may hold spaces and parentheses.
		if i := strings.LastIndex(line, ") "); i > 0 && strings.HasPrefix(line[i+2:], "Z") {
			z = append(z, line[:i+1])
		}
	}
	return z
}

// TestImage: the image migrates an empty database, serves with run_command
// on as uid 10001 under tini, runs a build's command in its sandbox, reaps
// the sandbox's processes, and on SIGTERM finishes (or hands back) the
// task in flight.
func TestImage(t *testing.T) {
	requireImage(t)
	dbURL := dbtest.NewEmptyURL(t)
	s3 := s3test.Config(t)
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	model := newSandboxModel(map[string]string{
		// The sandbox's own /proc shows its own processes: PID 1 there is
		// bubblewrap, not the container's tini.
		"probe": `echo "uid=$(id -u) pid1=$(cat /proc/1/comm)"`,
		"slow":  `sleep 8 && echo slept`,
	})
	srv := llmtest.NewWith(t, model)

	// The container shares the host's network: the test's Postgres, MinIO
	// and model listen on its loopback.
	env := []string{
		"DATABASE_URL=" + dbURL,
		"S3_ENDPOINT=" + s3.Endpoint, "S3_ACCESS_KEY=" + s3.AccessKey, "S3_SECRET_KEY=" + s3.SecretKey, "S3_BUCKET=" + s3.Bucket,
		"OPENAI_BASE_URL=" + srv.URL(), "OPENAI_API_KEY=container-test", "LLM_MODEL=" + llmtest.Model, "LLM_PRICES=" + llmtest.Model + "=0:0",
		"HTTP_ADDR=127.0.0.1:" + strconv.Itoa(port), "LOG_FORMAT=json", "WORKER_CONCURRENCY=4",
		// A container has no cgroup to divide among its sandboxes; its own
		// limits bound them together, as compose sets them.
		"RUN_COMMAND_ALLOW_UNCAPPED=true",
	}
	var envArgs []string
	for _, e := range env {
		envArgs = append(envArgs, "--env", e)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)

	out := podman(t, append(append([]string{"run", "--rm", "--network", "host"}, envArgs...), *image, "migrate")...)
	if !strings.Contains(out, "agentworker migrations applied") {
		t.Fatalf("migrate printed %q", out)
	}

	name := randomName("agentworker-ci-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := runPodman(ctx, "logs", "--tail", "60", name)
			t.Logf("logs of %s:\n%s", name, logs)
		}
		_, _ = runPodman(ctx, "rm", "-f", "-t", "0", name)
	})
	podman(t, append(append(append([]string{"run", "-d", "--name", name, "--network", "host", "--memory", "8g", "--pids-limit", "2048"},
		securityOpt...), envArgs...), *image)...)
	logs := func() string { l, _ := runPodman(context.Background(), "logs", "--tail", "40", name); return l }
	if ready := waitReady(t, base, 2*time.Minute, logs); !strings.Contains(ready, "run_command: on") {
		t.Fatalf("/readyz: %q, want run_command on; logs:\n%s", ready, logs())
	}
	if out := podman(t, "exec", name, "agentworker", "healthcheck"); !strings.HasPrefix(out, "healthy: ") {
		t.Errorf("healthcheck printed %q", out)
	}
	if pid1 := strings.TrimSpace(podman(t, "exec", name, "cat", "/proc/1/comm")); pid1 != "tini" {
		t.Errorf("PID 1 is %q, want tini", pid1)
	}

	db, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })

	t.Run("CommandInTheSandbox", func(t *testing.T) {
		id := insertBuild(t, db, "probe the sandbox")
		poll.Until(t, "the probe task to end", 3*time.Minute, func() bool {
			s := taskStatus(t, db, id)
			return s != "queued" && s != "running"
		})
		if s := taskStatus(t, db, id); s != "succeeded" {
			t.Fatalf("task %s ended %s; logs:\n%s", id, s, logs())
		}
		out := model.output("probe")
		printed, _ := out["output"].(string)
		if out["exitCode"] != float64(0) || !strings.Contains(printed, "uid=10001 pid1=bwrap") {
			t.Fatalf("the probe's npm run build as the model read it: %v", out)
		}
		// tini reaps what the sandbox leaves behind (agentworker as PID 1
		// would not).
		var z []string
		defer func() {
			if len(z) > 0 {
				t.Logf("unreaped: %v", z)
			}
		}()
		poll.Until(t, "no zombie processes in the container", 10*time.Second, func() bool {
			z = zombies(t, name)
			return len(z) == 0
		})
	})

	t.Run("SIGTERMWithATaskInFlight", func(t *testing.T) {
		id := insertBuild(t, db, "slow: sleep in the sandbox")
		select {
		case <-model.started["slow"]:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the slow task's command never started (status %s); logs:\n%s", taskStatus(t, db, id), logs())
		}
		// podman stop sends SIGTERM, and SIGKILL only after 60 s.
		podman(t, "stop", "-t", "60", name)
		if code := strings.TrimSpace(podman(t, "inspect", "-f", "{{.State.ExitCode}}", name)); code != "0" {
			t.Errorf("serve exited %s after SIGTERM; logs:\n%s", code, logs())
		}
		s := taskStatus(t, db, id)
		t.Logf("the task in flight at SIGTERM: %s", s)
		switch s {
		case "succeeded":
		case "queued": // handed back: the next replica finishes it
			podman(t, "start", name)
			poll.Until(t, "the handed back task to succeed", 3*time.Minute, func() bool { return taskStatus(t, db, id) == "succeeded" })
		default:
			t.Fatalf("task in flight at SIGTERM is %s, want succeeded or handed back (queued); logs:\n%s", s, logs())
		}
		if out := model.output("slow"); out["exitCode"] != float64(0) {
			t.Errorf("the slow task's npm run build as the model read it: %v", out)
		}
	})
}

// TestCompose: docker-compose.yml as it is (the images of Postgres and
// MinIO replaced by stand-ins when given), brought up with podman-compose,
// which ignores depends_on conditions: the api service becomes ready with
// run_command on, its healthcheck passes, and a build task created
// through its API succeeds with the bundled demo model.
func TestCompose(t *testing.T) {
	requireImage(t)
	if _, err := exec.LookPath("podman-compose"); err != nil {
		t.Fatalf("podman-compose: %v (scripts/test installs it)", err)
	}
	// compose's services run the image as agentworker:local.
	podman(t, "tag", *image, "localhost/agentworker:local")
	files := []string{"-f", repoPath("docker-compose.yml")}
	if *postgresImage != "" || *minioImage != "" {
		override := filepath.Join(t.TempDir(), "stand-ins.yml")
		body := "services:\n"
		if *postgresImage != "" {
			body += "  postgres:\n    image: " + *postgresImage + "\n"
		}
		if *minioImage != "" {
			body += "  minio:\n    image: " + *minioImage + "\n"
		}
		if err := os.WriteFile(override, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, "-f", override)
	}
	project := randomName("awci")
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	compose := func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "podman-compose", append(append([]string{"-p", project}, files...), args...)...)
		cmd.Dir = repoPath(".")
		// Nothing of this machine's model configuration: the demo model.
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "OPENAI_") && !strings.HasPrefix(e, "LLM_MODEL=") && !strings.HasPrefix(e, "JWT_SECRET=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, "AGENTWORKER_PORT="+strconv.Itoa(port))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("podman-compose %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	api := project + "_api_1"
	var upOutput string // podman-compose 1.0.3 exits 0 when a container does not start
	logs := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "--- podman-compose up\n%s", upOutput)
		for _, svc := range []string{"postgres", "minio", "migrate", "api", "worker"} {
			l, _ := runPodman(context.Background(), "logs", "--tail", "15", project+"_"+svc+"_1")
			fmt.Fprintf(&b, "--- %s\n%s", svc, l)
		}
		return b.String()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			t.Logf("logs:\n%s", logs())
		}
		if _, err := compose(ctx, "down", "-t", "10"); err != nil {
			t.Errorf("%v", err)
		}
		// podman-compose 1.0.3 leaves the project's network behind.
		if _, err := runPodman(ctx, "network", "rm", "-f", project+"_default"); err != nil {
			t.Errorf("remove the compose network: %v", err)
		}
	})
	if upOutput, err = compose(t.Context(), "up", "-d"); err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if ready := waitReady(t, base, 4*time.Minute, logs); !strings.Contains(ready, "run_command: on") {
		t.Fatalf("/readyz of the api service: %q, want run_command on", ready)
	}
	if out, err := runPodman(t.Context(), "healthcheck", "run", api); err != nil {
		t.Errorf("the api service's healthcheck: %v %s", err, out)
	}

	projectID := uuid.New()
	token := strings.TrimSpace(podman(t, "exec", api, "agentworker", "token", "--project", projectID.String()))
	call := func(method, path string, body any, want int) map[string]any {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
		return out
	}
	task := call(http.MethodPost, "/v1/projects/"+projectID.String()+"/tasks", map[string]any{"type": "build", "prompt": "create hello.txt saying hi"}, http.StatusCreated)
	id, _ := task["id"].(string)
	var status string
	poll.Until(t, "the compose task to end", 3*time.Minute, func() bool {
		status, _ = call(http.MethodGet, "/v1/tasks/"+id, nil, http.StatusOK)["status"].(string)
		return status != "queued" && status != "running"
	})
	if status != "succeeded" {
		t.Fatalf("task %s ended %s", id, status)
	}
	if file := call(http.MethodGet, "/v1/projects/"+projectID.String()+"/files/hello.txt", nil, http.StatusOK); file["content"] != "hi\n" {
		t.Errorf("hello.txt through the API: %v", file)
	}
}
