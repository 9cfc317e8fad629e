// Package toolbin finds the binary of a tool the tests and the bench run
// (minio, jaeger), installed by the README's test command.
package toolbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Find returns the path of the binary name: $envVar if set, else name on
// PATH, else in $GOBIN, $GOPATH/bin (the first GOPATH entry) or
// $HOME/go/bin, where `go install` puts it. The error wraps notInstalled
// when there is none; an envVar naming a missing file is a configuration
// error, which does not.
func Find(name, envVar string, notInstalled error) (string, error) {
	if bin := os.Getenv(envVar); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("find %s from %s: %w", name, envVar, err)
		}
		return bin, nil
	}
	if bin, err := exec.LookPath(name); err == nil {
		return bin, nil
	}
	var candidates []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		candidates = append(candidates, filepath.Join(gobin, name))
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		candidates = append(candidates, filepath.Join(filepath.SplitList(gopath)[0], "bin", name))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, "go", "bin", name))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w on PATH or in %s", notInstalled, strings.Join(candidates, ", "))
}
