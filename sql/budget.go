package sql

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentworker/agentworker/llm"
)

// DefaultBudgetLease is how long a replica's share of a provider's limit
// outlives its last renewal.
const DefaultBudgetLease = 10 * time.Second

// ProviderBudget shares the model providers' rate limits among the
// replicas through llm_provider_budget: it implements llm.Sharer. Each
// replica's row is its view of a key's limit under a lease; the live rows
// agree on one limit, which the replicas divide among themselves.
type ProviderBudget struct {
	// DB reaches the database; each Share is one statement.
	DB DBTX
	// Replica names this process; unique among the replicas.
	Replica string
	// Lease is how long a row counts after its last renewal. Defaults to
	// DefaultBudgetLease.
	Lease time.Duration
}

// Share implements llm.Sharer: it renews this replica's row for key with
// mine, removes rows a lease past their expiry, and returns the view the
// live rows agree on and how many there are. The agreement: a limit read
// from the provider's headers wins (the highest, should a key's limit have
// been raised); else the newest of the estimates past their cautious
// start (a replica that was refused lowers it for all, one that probed
// raises it for all); else the highest cautious one. The latest wait the
// provider asked for holds for all. The agreed Demand is the sum of the
// live replicas', each replica's share of the limit being its own part.
func (b *ProviderBudget) Share(ctx context.Context, key llm.PaceKey, mine llm.PaceState) (llm.PaceState, int, error) {
	lease := b.Lease
	if lease <= 0 {
		lease = DefaultBudgetLease
	}
	var blocked *time.Time
	if !mine.BlockedUntil.IsZero() {
		blocked = &mine.BlockedUntil
	}
	rows, err := b.DB.Query(ctx, `WITH mine AS (
			INSERT INTO llm_provider_budget AS b (endpoint, model, replica, rps, tps, learned, probing, blocked_until, demand, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, now() + $9::interval)
			ON CONFLICT (endpoint, model, replica) DO UPDATE SET rps = excluded.rps, tps = excluded.tps, demand = excluded.demand,
				learned = excluded.learned, probing = excluded.probing, blocked_until = excluded.blocked_until,
				expires_at = excluded.expires_at,
				changed_at = CASE WHEN b.rps = excluded.rps THEN b.changed_at ELSE now() END
			RETURNING rps, tps, learned, probing, blocked_until, changed_at, demand
		), gone AS (
			DELETE FROM llm_provider_budget WHERE (endpoint, model, replica) IN (
				SELECT endpoint, model, replica FROM llm_provider_budget
				WHERE endpoint = $1 AND model = $2 AND expires_at < now() - $9::interval
				FOR UPDATE SKIP LOCKED)
		)
		SELECT rps, tps, learned, probing, blocked_until, changed_at, demand FROM mine
		UNION ALL
		SELECT rps, tps, learned, probing, blocked_until, changed_at, demand FROM llm_provider_budget
		WHERE endpoint = $1 AND model = $2 AND replica <> $3 AND expires_at > now()`,
		key.Endpoint, key.Model, b.Replica, mine.RPS, mine.TPS, mine.Learned, mine.Probing, blocked, lease, max(mine.Demand, 1))
	if err != nil {
		return llm.PaceState{}, 0, fmt.Errorf("share the rate limit of %s model %q: %w", key.Endpoint, key.Model, err)
	}
	views, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (view, error) {
		var v view
		var until *time.Time
		err := row.Scan(&v.RPS, &v.TPS, &v.Learned, &v.Probing, &until, &v.changed, &v.Demand)
		if until != nil {
			v.BlockedUntil = *until
		}
		return v, err
	})
	if err != nil {
		return llm.PaceState{}, 0, fmt.Errorf("share the rate limit of %s model %q: %w", key.Endpoint, key.Model, err)
	}
	return agree(views), len(views), nil
}

// view is one replica's row.
type view struct {
	llm.PaceState
	changed time.Time
}

// agree is the view the replicas' views agree on (see Share).
func agree(views []view) llm.PaceState {
	var learned, probing llm.PaceState
	var settled view
	for _, v := range views {
		switch {
		case v.RPS <= 0:
		case v.Learned:
			learned.RPS = max(learned.RPS, v.RPS)
		case !v.Probing && (settled.RPS == 0 || v.changed.After(settled.changed)):
			settled = v
		case v.Probing:
			probing.RPS = max(probing.RPS, v.RPS)
		}
	}
	var out llm.PaceState
	switch {
	case learned.RPS > 0:
		out.RPS, out.Learned = learned.RPS, true
	case settled.RPS > 0:
		out.RPS = settled.RPS
	default:
		out.RPS, out.Probing = probing.RPS, true
	}
	for _, v := range views {
		out.Demand += v.Demand
		out.TPS = max(out.TPS, v.TPS)
		if v.BlockedUntil.After(out.BlockedUntil) {
			out.BlockedUntil = v.BlockedUntil
		}
	}
	return out
}
