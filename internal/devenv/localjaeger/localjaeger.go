// Package localjaeger runs a private Jaeger (v2, an OpenTelemetry Collector
// build) as a child process: the real OTLP receiver of the tracing tests and
// of `agentworker bench`'s tracing scenario. It keeps traces in memory,
// serves them on its query API (/api/traces), and hands the metrics it
// receives to a Prometheus endpoint, all on 127.0.0.1 ports chosen by the
// kernel.
//
// It uses the jaeger binary installed on the machine (see FindBinary; the
// README's test command builds it from the module proxy) and downloads
// nothing. The process dies with its parent on Linux
// (internal/devenv/supervise).
package localjaeger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/internal/devenv/supervise"
	"github.com/agentworker/agentworker/internal/devenv/toolbin"
)

// ErrNotInstalled is returned, wrapped, by FindBinary when no
// jaeger binary can be found.
var ErrNotInstalled = errors.New("jaeger binary not found")

// FindBinary returns the path of the jaeger binary: JAEGER_BIN if set, else
// jaeger on PATH, else in $GOBIN or $GOPATH/bin (the first GOPATH entry) or
// $HOME/go/bin. A JAEGER_BIN naming a missing file is a configuration
// error, which does not wrap ErrNotInstalled.
func FindBinary() (string, error) {
	return toolbin.Find("jaeger", "JAEGER_BIN", ErrNotInstalled)
}

// Server is a running Jaeger started by Start.
type Server struct {
	// OTLPHTTP is the OTLP/HTTP receiver's base URL (http://127.0.0.1:port),
	// the value of OTEL_EXPORTER_OTLP_ENDPOINT; OTLPGRPC the gRPC
	// receiver's (same form).
	OTLPHTTP, OTLPGRPC string
	// Query is the query service's base URL: GET Query+"/api/traces/<id>".
	Query string
	// Metrics is the Prometheus page of the metrics received.
	Metrics string
	child   *supervise.Child
	dir     string
}

// config is the collector configuration: OTLP in, traces to memory and
// the query service, metrics to a Prometheus page. Ports are filled in.
const config = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%[1]d
      status:
        enabled: true
        path: /status
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%[2]d
    grpc:
      endpoint: 127.0.0.1:%[3]d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%[4]d
      grpc:
        endpoint: 127.0.0.1:%[5]d
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
  prometheus:
    endpoint: 127.0.0.1:%[6]d
`

// Start starts Jaeger from bin (see FindBinary) and returns once its
// receivers and query service answer (at most 60 s). ctx bounds the start;
// call Stop to end the server. Its output goes to dir/jaeger.log.
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	var ports [6]any
	for i := range ports {
		p, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	cfgPath := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, config, ports[:]...), 0o600); err != nil {
		return nil, fmt.Errorf("write jaeger config: %w", err)
	}
	logPath := filepath.Join(dir, "jaeger.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create jaeger log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	child, err := supervise.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("run jaeger %s: %w", bin, err)
	}
	s := &Server{OTLPHTTP: fmt.Sprintf("http://127.0.0.1:%d", ports[3]), OTLPGRPC: fmt.Sprintf("http://127.0.0.1:%d", ports[4]),
		Query: fmt.Sprintf("http://127.0.0.1:%d", ports[1]), Metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[5]),
		child: child, dir: dir}
	health := fmt.Sprintf("http://127.0.0.1:%d/status", ports[0])
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = child.WaitReady(wctx, 50*time.Millisecond, func(ctx context.Context) error {
		for _, u := range []string{health, s.Query + "/api/services"} {
			if err := get(ctx, u); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		child.Kill()
		out, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("start jaeger %s: %w\n%s", bin, err, tail(out, 2000))
	}
	return s, nil
}

func get(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Stop ends the server.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.child.Stop(ctx, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop jaeger: %w", err)
	}
	return nil
}

// Log returns the server's output so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "jaeger.log"))
	return string(b)
}
