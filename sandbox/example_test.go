package sandbox_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/agentworker/agentworker/sandbox"
	"github.com/agentworker/agentworker/storage"
)

// A task's workspace over the project's files: each Run syncs what changed
// and runs an npm script in the sandbox.
func Example() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Config{Concurrency: 2})
	if err != nil {
		log.Printf("run_command is off: %v", err) // e.g. bubblewrap is not installed
		return
	}
	store, err := storage.NewLocal("data")
	if err != nil {
		log.Fatal(err)
	}
	ws := sb.Workspace("task-1", store, "project-1")
	defer ws.Close()
	out, err := ws.Run(ctx, "typecheck", 30*time.Second)
	if err != nil {
		log.Fatal(err) // no package.json, no such script, or the sandbox failed
	}
	fmt.Println(out.Summary()) // e.g. npm run typecheck failed with exit code 2 after 1.8s
	fmt.Print(out.Output.ForModel())
}
