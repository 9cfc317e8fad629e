package localpg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentworker/agentworker/internal/devenv/localpg"
	"github.com/jackc/pgx/v5"
)

func Example() {
	ctx := context.Background()

	cluster, err := localpg.Start(ctx, localpg.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := cluster.Stop(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		log.Fatal(err)
	}
	fmt.Println(version)
}
