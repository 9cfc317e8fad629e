// Command agentworker turns ai_tasks rows into finished AI work.
//
//	agentworker serve     run the worker (and its HTTP endpoints)
//	agentworker migrate   apply River's migrations and ours
//	agentworker submit    create a task (--follow to watch it)
//	agentworker follow    print a task's timeline live
//	agentworker token     print a bearer token for the console and /v1
//	agentworker revoke    refuse the tokens issued so far, of projects or all
//	agentworker demo      run the whole path on the embedded default
//	agentworker bench     measure it against raw River
//	agentworker healthcheck  ask this host's serve whether it is up (for containers)
//
// Configuration comes from the environment only: `agentworker help` lists
// every variable (docs/configuration.md is generated from the same tags).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: agentworker <command> [flags]

commands:
  serve                       run the worker: claim tasks, run agents, serve HTTP
  migrate                     apply database migrations (River's and ours)
  submit [flags] <prompt>     create a task; --project, --type, --agent, --priority,
                              --depends-on, --parent, --input JSON, --follow
  follow [--after N] [--sse URL] <task>
                              print a task's events live until it ends
  token [--project ID,…] [--service] [--ttl 24h]
                              print a bearer token (signed with JWT_SECRET)
  revoke (--project ID,… | --all)
                              refuse every token of those projects (or every
                              token, service tokens included) issued until now
  demo                        run a build task end to end on the embedded default
  bench [--quick] [--json]    measure latency, throughput, events, tools, memory vs raw River
  healthcheck                 exit 0 when this host's serve answers /healthz on HTTP_ADDR
                              (a container's healthcheck: the image has no curl)
  help                        this text and every environment variable
`

func main() {
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "agentworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	if cmd := args[0]; cmd == "help" || cmd == "-h" || cmd == "--help" {
		fmt.Fprint(out, usage+"\nenvironment (defaults in the second column):\n")
		return configUsage(out)
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, cfg)
	case "migrate":
		return migrate(ctx, cfg, out)
	case "submit":
		return submit(ctx, cfg, rest, out)
	case "follow":
		return follow(ctx, cfg, rest, out)
	case "token":
		return token(cfg, rest, out)
	case "revoke":
		return revoke(ctx, cfg, rest, out)
	case "demo":
		return demo(ctx, cfg, out)
	case "bench":
		return runBench(ctx, cfg, rest, out)
	case "healthcheck":
		return healthcheck(ctx, cfg, out)
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
