package sql

import (
	"context"
	"fmt"
	"time"
)

// AllTokens is the revocation scope of every token, service tokens
// included.
const AllTokens = "*"

// RevokeTokens refuses from now on every token of the scopes (project ids,
// or AllTokens) issued before the returned moment: the next whole second,
// as a token's iat counts whole seconds, so a token issued in this second is
// refused too.
func RevokeTokens(ctx context.Context, db DBTX, scopes []string) (time.Time, error) {
	var nb time.Time
	err := db.QueryRow(ctx, `WITH nb AS (SELECT date_trunc('second', now()) + interval '1 second' AS t),
		up AS (INSERT INTO agentworker_token_epochs (scope, not_before)
			SELECT s, nb.t FROM unnest($1::text[]) s, nb
			ON CONFLICT (scope) DO UPDATE SET not_before = greatest(agentworker_token_epochs.not_before, excluded.not_before), updated_at = now())
		SELECT t FROM nb`, scopes).Scan(&nb)
	if err != nil {
		return time.Time{}, fmt.Errorf("revoke tokens of %v: %w", scopes, err)
	}
	return nb, nil
}

// TokensNotBefore returns the latest revocation among the scopes: a token
// of them issued before it is refused. Zero when none was revoked.
func TokensNotBefore(ctx context.Context, db DBTX, scopes []string) (time.Time, error) {
	var nb *time.Time
	err := db.QueryRow(ctx, `SELECT max(not_before) FROM agentworker_token_epochs WHERE scope = ANY($1::text[])`, scopes).Scan(&nb)
	if err != nil {
		return time.Time{}, fmt.Errorf("read token revocations of %v: %w", scopes, err)
	}
	if nb == nil {
		return time.Time{}, nil
	}
	return *nb, nil
}

// TokenRevocations returns the latest revocation of each of the scopes that
// has one.
func TokenRevocations(ctx context.Context, db DBTX, scopes []string) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, `SELECT scope, not_before FROM agentworker_token_epochs WHERE scope = ANY($1::text[])`, scopes)
	if err != nil {
		return nil, fmt.Errorf("read token revocations of %d scopes: %w", len(scopes), err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var scope string
		var nb time.Time
		if err := rows.Scan(&scope, &nb); err != nil {
			return nil, fmt.Errorf("read token revocations of %d scopes: %w", len(scopes), err)
		}
		out[scope] = nb
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read token revocations of %d scopes: %w", len(scopes), err)
	}
	return out, nil
}
