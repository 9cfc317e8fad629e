package sql

import (
	"context"
	"fmt"
	"time"
)

// Refusal is one refused API request, as audit_log keeps it.
type Refusal struct {
	Actor      string
	Action     string // "METHOD path pattern"
	Resource   string // the request's path
	Reason     string
	RemoteAddr string
	// Suppressed counts the actor's refusals left out since its previous record.
	Suppressed int
}

// AuditRecord is a row of audit_log.
type AuditRecord struct {
	Refusal
	ID      int64
	At      time.Time
	Outcome string
}

// RecordRefusal appends r to audit_log.
func RecordRefusal(ctx context.Context, db DBTX, r Refusal) error {
	if _, err := db.Exec(ctx, `INSERT INTO audit_log (actor, action, resource, reason, remote_addr, suppressed)
		VALUES ($1, $2, $3, $4, $5, $6)`, r.Actor, r.Action, r.Resource, r.Reason, r.RemoteAddr, r.Suppressed); err != nil {
		return fmt.Errorf("record refusal of %s %s by %s: %w", r.Action, r.Resource, r.Actor, err)
	}
	return nil
}

// AuditLog returns audit_log's rows of actor (every actor when empty), oldest first.
func AuditLog(ctx context.Context, db DBTX, actor string) ([]AuditRecord, error) {
	rows, err := db.Query(ctx, `SELECT id, at, actor, action, resource, outcome, reason, remote_addr, suppressed
		FROM audit_log WHERE $1 = '' OR actor = $1 ORDER BY id`, actor)
	if err != nil {
		return nil, fmt.Errorf("read audit log of %q: %w", actor, err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var a AuditRecord
		if err := rows.Scan(&a.ID, &a.At, &a.Actor, &a.Action, &a.Resource, &a.Outcome, &a.Reason, &a.RemoteAddr, &a.Suppressed); err != nil {
			return nil, fmt.Errorf("read audit log of %q: %w", actor, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit log of %q: %w", actor, err)
	}
	return out, nil
}

// DeleteAuditBefore deletes up to limit audit_log rows recorded before
// before, oldest first (through audit_log_at_idx), and returns how many.
func DeleteAuditBefore(ctx context.Context, db DBTX, before time.Time, limit int) (int, error) {
	tag, err := db.Exec(ctx, `DELETE FROM audit_log WHERE id IN (
		SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete up to %d audit records before %s: %w", limit, before.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}
