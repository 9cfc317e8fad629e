package sql

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Pipeline is statements sent to Postgres in one round trip, which runs
// them as one implicit transaction: they all commit, or when one fails,
// none does. It replaces BEGIN, the statements and COMMIT (a round trip
// each) where no statement's arguments depend on an earlier one's result.
//
// Results are read after the round trip, in order, by the Queue functions'
// readers. A reader's error (ErrFenced, say) does not undo the commit, so
// what is queued must not depend on it: a fenced statement writes nothing
// once its holder lost the task, and neither do the fenced statements
// after it, since the first one that wrote locked the task row until the
// commit.
type Pipeline struct {
	batch pgx.Batch
}

// Batcher sends a Pipeline: a pool or a connection, not a transaction (the
// statements would join it).
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Run sends the statements and reads their results; it returns the first
// error, of a statement (nothing committed) or of a reader.
func (p *Pipeline) Run(ctx context.Context, db Batcher) error {
	if p.batch.Len() == 0 {
		return nil
	}
	return db.SendBatch(ctx, &p.batch).Close()
}
