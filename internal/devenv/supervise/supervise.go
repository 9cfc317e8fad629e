// Package supervise runs a development server (a private PostgreSQL, a
// private MinIO) as a child process of this one: started, awaited until it
// is ready, asked to stop and killed when it does not.
//
// A child does not outlive its parent on Linux: the kernel kills it
// (SIGKILL) when the thread that started it ends, so the goroutine that
// starts and waits for it stays locked to its thread for the child's life.
// Elsewhere a child can outlive a parent that is killed.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// ErrExited reports a child that exited while WaitReady waited for it.
var ErrExited = errors.New("child process exited")

// ErrKilled reports a child that was asked to stop, did not exit in time
// and was killed.
var ErrKilled = errors.New("child process did not exit in time; killed it")

// Child is a process started by Start.
type Child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	err    error         // cmd.Wait's result; read only after exited is closed
}

// Start starts cmd as a child that dies with this process. cmd.SysProcAttr
// may hold other attributes (credentials, a process group); Start adds the
// parent-death signal, set by Go after switching credentials, so it holds
// for a child run as another user too.
func Start(cmd *exec.Cmd) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	dieWithParent(cmd.SysProcAttr)
	c := &Child{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go c.run(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return c, nil
}

// run starts the process and waits for it, on a thread of its own for the
// child's life: the parent-death signal follows the thread, not the process.
func (c *Child) run(started chan<- error) {
	runtime.LockOSThread()
	defer close(c.exited)
	err := c.cmd.Start()
	started <- err
	if err == nil {
		c.err = c.cmd.Wait()
	}
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Exited is closed once the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err is how the child exited (exec.Cmd.Wait's error); read it only once
// Exited is closed.
func (c *Child) Err() error { return c.err }

// Kill sends SIGKILL to the child and waits until it has exited.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill() // fails only when the process is already gone
	<-c.exited
}

// Stop asks the child to exit with sig and waits until it has. When ctx
// ends first it kills the child and returns an error wrapping ErrKilled.
// An exit by sig itself is a clean one; any other failed exit is returned.
func (c *Child) Stop(ctx context.Context, sig syscall.Signal) error {
	var errs []error
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("signal pid %d to exit: %w", c.Pid(), err))
	}
	select {
	case <-c.exited:
		if c.err != nil && !endedBy(c.err, sig) {
			errs = append(errs, fmt.Errorf("exit of pid %d: %w", c.Pid(), c.err))
		}
	case <-ctx.Done():
		c.Kill()
		errs = append(errs, fmt.Errorf("pid %d: %w: %w", c.Pid(), ErrKilled, ctx.Err()))
	}
	return errors.Join(errs...)
}

// endedBy reports whether err is the exit of a process ended by sig.
func endedBy(err error, sig syscall.Signal) bool {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	status, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == sig
}

// permanent marks an error of a readiness check after which waiting longer
// cannot help.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err, returned by a readiness check, as final: WaitReady
// returns it at once instead of checking again.
func Permanent(err error) error { return permanent{err} }

// WaitReady calls ready every interval until it returns nil. It returns
// at once ready's error marked Permanent, or an error wrapping ErrExited
// and the exit status when the child exits first; when ctx ends, ctx's
// error and ready's last.
func (c *Child) WaitReady(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if p, ok := errors.AsType[permanent](err); ok {
			return p.err
		}
		select {
		case <-c.exited:
			return fmt.Errorf("pid %d: %w before it was ready (%v)", c.Pid(), ErrExited, c.err)
		case <-ctx.Done():
			return fmt.Errorf("pid %d not ready: %w (last check: %w)", c.Pid(), ctx.Err(), err)
		case <-tick.C:
		}
	}
}
