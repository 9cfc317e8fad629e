package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/agentworker/agentworker/auth"
)

// token prints a bearer token signed with JWT_SECRET, for the console and
// the /v1 API: for the projects named, or for every project (--service).
func token(cfg config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	projects := fs.String("project", "", "comma-separated project ids (uuids) the token may use")
	service := fs.Bool("service", false, "a service_role token: every project")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	subject := fs.String("subject", "", "the bearer's name (sub), written to audit events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.JWTSecret == "" {
		return errors.New("token: JWT_SECRET is not set")
	}
	if *ttl <= 0 {
		return fmt.Errorf("token: --ttl must be positive, got %s", *ttl)
	}
	var c auth.Claims
	if *service {
		c.Role = auth.RoleService
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
	c.Subject = *subject
	c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(*ttl))
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
