package main

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated files: docs/configuration.md from the config struct, deploy/seccomp.json from Docker's default profile")

const configDocs = "../../docs/configuration.md"

// TestConfigDocs keeps the configuration reference generated from the
// struct tags, so a variable is documented once.
func TestConfigDocs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := configMarkdown(&buf); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(configDocs, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(configDocs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s is out of date with the config struct; run go test ./cmd/agentworker -run TestConfigDocs -update", configDocs)
	}
}

// TestEveryVariableDescribed: a variable without a desc tag would be an
// undocumented one.
func TestEveryVariableDescribed(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Tag.Get("envconfig") == "" || strings.TrimSpace(f.Tag.Get("desc")) == "" {
			t.Errorf("config.%s needs an envconfig name and a desc tag", f.Name)
		}
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"help"}, &out); err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		if name := typ.Field(i).Tag.Get("envconfig"); !strings.Contains(out.String(), name) {
			t.Errorf("help does not list %s", name)
		}
	}
}
