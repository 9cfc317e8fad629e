package postgresttest_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentworker/agentworker/testing/dbtest"
	"github.com/agentworker/agentworker/testing/postgresttest"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "postgrest")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("FromEnv", func(t *testing.T) {
		t.Setenv("POSTGREST_BIN", bin)
		if got, err := postgresttest.FindBinary(); err != nil || got != bin {
			t.Errorf("FindBinary() = %q, %v; want %q", got, err, bin)
		}
	})
	t.Run("EnvNamesMissingFile", func(t *testing.T) {
		t.Setenv("POSTGREST_BIN", filepath.Join(dir, "absent"))
		if _, err := postgresttest.FindBinary(); err == nil || errors.Is(err, postgresttest.ErrNotInstalled) {
			t.Errorf("FindBinary() error = %v, want a configuration error", err)
		}
	})
	t.Run("FromGOPATH", func(t *testing.T) {
		t.Setenv("POSTGREST_BIN", "")
		t.Setenv("GOBIN", "")
		gopath := t.TempDir()
		if err := os.MkdirAll(filepath.Join(gopath, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(gopath, "bin", "postgrest")
		if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GOPATH", gopath)
		if got, err := postgresttest.FindBinary(); err != nil || got != want {
			t.Errorf("FindBinary() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("Nowhere", func(t *testing.T) {
		t.Setenv("POSTGREST_BIN", "")
		t.Setenv("GOBIN", "")
		t.Setenv("GOPATH", t.TempDir())
		t.Setenv("HOME", t.TempDir())
		t.Setenv("PATH", t.TempDir())
		if _, err := postgresttest.FindBinary(); !errors.Is(err, postgresttest.ErrNotInstalled) {
			t.Errorf("FindBinary() error = %v, want ErrNotInstalled", err)
		}
	})
}

func TestStart(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	srv := postgresttest.Start(t, postgresttest.Config{
		DatabaseURL: postgresttest.AuthenticatorURL(t, url),
		JWTSecret:   "postgresttest-secret-of-32-bytes!!",
	})
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for path, want := range map[string]int{
		"/":         http.StatusOK,           // the OpenAPI description
		"/ai_tasks": http.StatusUnauthorized, // anon may read nothing
	} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %s, want %d", path, resp.Status, want)
		}
	}
}
