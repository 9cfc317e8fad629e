package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/auth"
	agentsql "github.com/agentworker/agentworker/sql"
)

// token prints a bearer token signed with JWT_SECRET, for the console and
// the /v1 API: for the projects named, or for every project (--service).
func token(cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	projects := fs.String("project", "", "comma-separated project ids (uuids) the token may use")
	service := fs.Bool("service", false, "a service_role token: every project")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid (at most JWT_MAX_TTL, JWT_SERVICE_MAX_TTL for --service)")
	subject := fs.String("subject", "", "the bearer's name (sub), written to audit events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.JWTSecret == "" {
		return errors.New("token: JWT_SECRET is not set")
	}
	var c auth.Claims
	ceiling := cfg.JWTMaxTTL
	if *service {
		c.Role, ceiling = auth.RoleService, cfg.JWTServiceMaxTTL
	}
	if *ttl <= 0 || (ceiling > 0 && *ttl > ceiling) {
		return fmt.Errorf("token: --ttl must be positive and at most %s, got %s", ceiling, *ttl)
	}
	for p := range strings.SplitSeq(*projects, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		id, err := uuid.Parse(p)
		if err != nil {
			return fmt.Errorf("token: --project %q is not a uuid: %w", p, err)
		}
		c.Projects = append(c.Projects, id.String())
	}
	if c.Role == "" && len(c.Projects) == 0 {
		return errors.New("token: name the projects (--project) or ask for --service")
	}
	now := time.Now()
	c.Subject, c.ID = *subject, uuid.NewString()
	c.IssuedAt, c.ExpiresAt = jwt.NewNumericDate(now), jwt.NewNumericDate(now.Add(*ttl))
	v, err := auth.NewVerifier(cfg.JWTSecret, nil)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	signed, err := v.Sign(c)
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	_, err = fmt.Fprintln(out, signed)
	return err
}

// revoke refuses, from the next second on, every token of the projects
// named (or every token, with --all) issued until then; tokens issued later
// work.
func revoke(ctx context.Context, cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("revoke", flag.ContinueOnError)
	projects := fs.String("project", "", "comma-separated project ids (uuids) whose tokens to refuse")
	all := fs.Bool("all", false, "refuse every token, service tokens included")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var scopes []string
	if *all {
		scopes = append(scopes, agentsql.AllTokens)
	}
	for p := range strings.SplitSeq(*projects, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		id, err := uuid.Parse(p)
		if err != nil {
			return fmt.Errorf("revoke: --project %q is not a uuid: %w", p, err)
		}
		scopes = append(scopes, id.String())
	}
	if len(scopes) == 0 {
		return errors.New("revoke: name the projects (--project) or ask for --all")
	}
	pool, err := connect(ctx, cfg, oneShot)
	if err != nil {
		return err
	}
	defer pool.Close()
	nb, err := agentsql.RevokeTokens(ctx, pool, scopes)
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	_, err = fmt.Fprintf(out, "tokens of %s issued before %s are refused\n", strings.Join(scopes, ", "), nb.UTC().Format(time.RFC3339))
	return err
}
