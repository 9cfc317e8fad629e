package sql

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// ConfigurePool readies cfg's connections for our statements, after an
// AfterConnect already set: uuid.UUID values are sent and read as binary
// uuids. Without it pgx sends every uuid parameter through its
// driver.Valuer: formatted as text, refused by the binary uuid encoder (an
// error built with fmt), parsed back and encoded again, a twentieth of a
// busy worker's CPU.
func ConfigurePool(cfg *pgxpool.Config) {
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		pgxuuid.Register(conn.TypeMap())
		return nil
	}
}
