package archive_test

import (
	"context"
	"errors"
	"log"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentworker/agentworker/archive"
	"github.com/agentworker/agentworker/events/sse"
	"github.com/agentworker/agentworker/storage"
)

// An archiver over the worker's pool and the projects' S3 store serves the
// event streams (so archived timelines read back), and is what retention
// calls before it drops the rows of finished tasks: when ArchiveTasks
// fails, nothing may be dropped.
func Example() {
	ctx := context.Background()
	var (
		pool  *pgxpool.Pool // the worker's own connection
		store *storage.S3   // storage.NewS3(ctx, …), the projects' bucket
		hub   *sse.Hub
	)
	arch, err := archive.New(pool, store, archive.Config{Prefix: "_archive/"})
	if err != nil {
		log.Fatal(err)
	}
	_ = sse.NewStreams(pool, hub, sse.Config{Archive: arch})

	beforeDrop := func(ctx context.Context, taskIDs []uuid.UUID) error {
		return arch.ArchiveTasks(ctx, taskIDs)
	}
	beforeDelete := func(ctx context.Context, taskIDs []uuid.UUID) error {
		return arch.DeleteArchives(ctx, taskIDs) // then delete the task rows
	}
	if err := beforeDrop(ctx, nil); errors.Is(err, archive.ErrUnfinished) {
		log.Print("some tasks still run: keep their partition")
	}
	_ = beforeDelete
}
