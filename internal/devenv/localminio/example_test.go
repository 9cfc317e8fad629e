package localminio_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentworker/agentworker/internal/devenv/localminio"
	"github.com/agentworker/agentworker/storage"
)

func Example() {
	ctx := context.Background()

	server, err := localminio.Start(ctx, localminio.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := server.Stop(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	cfg := server.Config()
	cfg.Bucket = "projects"
	store, err := storage.NewS3(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	const project = "0190c6a4-7d3e-7b7a-9c1e-6f4f3b2a1d00"
	if _, err := store.Write(ctx, project, "README.md", []byte("# demo\n")); err != nil {
		log.Fatal(err)
	}
	data, _, err := store.Read(ctx, project, "README.md")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(data))
}
