package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/agentworker/agentworker/internal/devenv/proccpu"
	"github.com/agentworker/agentworker/llm/scripted"
)

// ServeInstantModel is the child process of the throughput scenario: it
// serves the instant model on a loopback port, writes its base URL as the
// first line of out, serves until in closes or ctx ends, then writes the
// conversation it recorded (JSON, see recordConversation) as one more line.
// The scenario runs its model so because the model's CPU is the provider's,
// not the worker's: hosted in the bench process, it was counted as the
// worker's.
func ServeInstantModel(ctx context.Context, in io.Reader, out io.Writer) error {
	responder, conversation := recordConversation(instantModel())
	model, err := scripted.ListenLoopback(responder)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, model.URL); err != nil {
		_ = model.Close()
		return fmt.Errorf("tell the parent the model's URL: %w", err)
	}
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
	}
	if err := model.Close(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%s\n", conversation()); err != nil {
		return fmt.Errorf("tell the parent the conversation: %w", err)
	}
	return nil
}

// modelProcess is the instant model served by a child process
// (ServeInstantModel through `agentworker bench -serve-instant-model`).
type modelProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	url   string
}

// startModelProcess starts binary's instant model and reads its URL.
func startModelProcess(ctx context.Context, binary string) (*modelProcess, error) {
	cmd := exec.CommandContext(ctx, binary, "bench", "-serve-instant-model")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("model process: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("model process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s bench -serve-instant-model: %w", binary, err)
	}
	m := &modelProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	type line struct {
		text string
		err  error
	}
	lines := make(chan line, 1)
	go func() {
		text, err := m.out.ReadString('\n')
		lines <- line{strings.TrimSpace(text), err}
	}()
	var got line
	select {
	case got = <-lines:
	case <-time.After(30 * time.Second):
		got.err = errors.New("no URL within 30 s")
	}
	if got.err != nil || !strings.HasPrefix(got.text, "http://127.0.0.1:") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("model process: read its URL (%q): %w", got.text, got.err)
	}
	m.url = got.text
	return m, nil
}

// cpu is the child's CPU time so far (user + system).
func (m *modelProcess) cpu() time.Duration {
	t, _ := proccpu.Ticks(m.cmd.Process.Pid)
	return time.Duration(t) * proccpu.Tick
}

// stop ends the child and returns the conversation it recorded.
func (m *modelProcess) stop() ([]byte, error) {
	_ = m.stdin.Close()
	line, rerr := m.out.ReadString('\n')
	werr := m.cmd.Wait()
	if rerr != nil || werr != nil {
		return nil, fmt.Errorf("model process: %w", errors.Join(rerr, werr))
	}
	return []byte(strings.TrimSpace(line)), nil
}
