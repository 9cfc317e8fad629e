package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/agentworker/agentworker/llm/scripted"
	agentsql "github.com/agentworker/agentworker/sql"
)

const demoPrompt = "create hello.txt saying hi"

// demo runs one build task end to end on whatever is configured, filling the
// gaps with the embedded default: a private Postgres from the local
// binaries, a local-directory store, and the bundled scripted model.
func demo(ctx context.Context, cfg config, out io.Writer) error {
	if _, set := os.LookupEnv("LOG_LEVEL"); !set {
		cfg.LogLevel = "warn" // keep the timeline readable
	}
	log := cfg.logger()
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(out, "database: no DATABASE_URL; starting a private PostgreSQL from the local binaries…")
		cluster, err := localpg.Start(ctx, localpg.Config{Logger: log})
		if err != nil {
			return fmt.Errorf("demo: start embedded postgres: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := cluster.Stop(sctx); err != nil {
				log.Warn("stop embedded postgres", slog.String("err", err.Error()))
			}
		}()
		cfg.DatabaseURL = cluster.URL("postgres")
	}
	if cfg.S3Endpoint == "" && cfg.StorageDir == "" {
		dir, err := os.MkdirTemp("", "agentworker-demo-files-")
		if err != nil {
			return fmt.Errorf("demo: create storage dir: %w", err)
		}
		cfg.StorageDir = dir
		fmt.Fprintf(out, "storage: no S3_ENDPOINT or STORAGE_DIR; project files go to %s\n", dir)
	}
	if !cfg.llmConfigured() {
		stopModel, err := startDemoModel(&cfg, log)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer stopModel()
		fmt.Fprintln(out, "model: "+demoModelNotice)
	} else {
		fmt.Fprintf(out, "model: %s at %s\n", cfg.LLMModel, orDefault(cfg.OpenAIBaseURL, "api.openai.com"))
	}

	pool, err := connect(ctx, cfg, runsTasks)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := agentsql.MigrateWithResult(ctx, pool, log); err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	model, err := newLLM(cfg, log, pool, nil)
	if err != nil {
		return err
	}
	sb, _ := cfg.sandbox(ctx, log)
	arch, err := openArchive(cfg, log, pool, st)
	if err != nil {
		return err
	}
	svc, err := startWorker(ctx, cfg, log, pool, st, arch, model, nil, sb, nil)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := svc.Stop(sctx); err != nil {
			log.Warn("stop worker", slog.String("err", err.Error()))
		}
	}()

	projectID := uuid.New()
	// Plain SQL, as any app would insert a task.
	var taskID uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', $2) RETURNING id`,
		projectID, demoPrompt).Scan(&taskID); err != nil {
		return fmt.Errorf("demo: insert task: %w", err)
	}
	fmt.Fprintf(out, "\nINSERT INTO ai_tasks (project_id, type, prompt) VALUES ('%s', 'build', '%s')\ntask %s — timeline:\n\n", projectID, demoPrompt, taskID)
	start := time.Now()
	if err := printTimeline(ctx, pool, taskID, 0, out); err != nil {
		return err
	}
	task, err := agentsql.GetTask(ctx, pool, taskID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\ntask %s ended %s in %s\n", task.ID, task.Status, time.Since(start).Round(time.Millisecond))
	if task.Status != agentsql.StatusSucceeded {
		return fmt.Errorf("demo task ended %s: %s", task.Status, task.Error)
	}
	fmt.Fprintf(out, "result: %s\n", task.Result)
	files, err := st.List(ctx, projectID.String(), "")
	if err != nil {
		return err
	}
	for _, f := range files {
		content, _, err := st.Read(ctx, projectID.String(), f.Path)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n--- %s (%d bytes)\n%s", f.Path, f.Size, content)
	}
	return nil
}

// demoModelNotice is what demo prints and serve logs when they fall back to
// the scripted model.
const demoModelNotice = "no OPENAI_BASE_URL or OPENAI_API_KEY; using the bundled scripted demo model (no real LLM)"

// startDemoModel serves the bundled scripted model on a loopback port and
// points cfg at it; stop shuts it down.
func startDemoModel(cfg *config, log *slog.Logger) (stop func(), err error) {
	model, err := scripted.ListenLoopback(scripted.DemoModel())
	if err != nil {
		return nil, err
	}
	cfg.OpenAIBaseURL, cfg.LLMModel = model.URL, "agentworker-demo"
	// The scripted model costs nothing; LLM_PRICES may still say otherwise.
	cfg.LLMPrices = cfg.LLMModel + "=0:0," + cfg.LLMPrices
	return func() {
		if err := model.Close(); err != nil {
			log.Warn("stop the demo model", slog.String("err", err.Error()))
		}
	}, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
