package sql_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/dbtest"
)

// apiRoles are the roles PostgREST and Supabase switch to per request.
var apiRoles = []string{"anon", "authenticated", "service_role"}

// access is what each API role may do to each relation of the schema: an
// operation alone means on every row, "op:own" only on the rows of the
// projects the token names. Everything not listed is refused: a relation a
// migration adds is internal until it is listed here (see the rule at the
// baseline's row level security section).
var access = map[string]map[string][]string{
	"ai_tasks": {
		"authenticated": {"select:own", "insert:own"},
		"service_role":  {"select", "insert", "update", "delete"},
	},
	"agent_events":        {"authenticated": {"select:own"}, "service_role": {"select"}},
	"task_runs":           {"authenticated": {"select:own"}, "service_role": {"select"}},
	"inbox_items":         {"authenticated": {"select:own"}, "service_role": {"select"}},
	"project_usage_daily": {"authenticated": {"select:own"}, "service_role": {"select"}},
	"usage_daily":         {"service_role": {"select"}},
	"usage_rollup":        {"authenticated": {"select:own"}, "service_role": {"select"}},
	"audit_log":           {"service_role": {"select"}},
	"agents": {
		"authenticated": {"select:own", "insert:own", "update:own", "delete:own"},
		"service_role":  {"select", "insert", "update", "delete"},
	},
	"task_dependencies": {
		"authenticated": {"select:own", "insert:own"},
		"service_role":  {"select", "insert", "delete"},
	},
	"task_comments":  {"authenticated": {"select:own"}, "service_role": {"select", "insert"}},
	"documents":      {"authenticated": {"select:own"}, "service_role": {"select"}},
	"tool_approvals": {"authenticated": {"select:own"}, "service_role": {"select"}},
	"project_settings": {
		"authenticated": {"select:own", "insert:own", "update:own"},
		"service_role":  {"select", "insert", "update", "delete"},
	},
	"project_day_spend": {"authenticated": {"select:own"}, "service_role": {"select"}},
	"task_tree_rollup":  {"authenticated": {"select:own"}, "service_role": {"select"}},
}

// apiFunctions are the functions authenticated and service_role may
// execute; no other function of the schema is executable by an API role,
// and none by PUBLIC.
var apiFunctions = []string{
	"agentworker_jwt_projects()",
	"agentworker_cancel_task(uuid,integer,text)",
	"agentworker_pause_task(uuid,integer,text)",
	"agentworker_resume_task(uuid,integer,text)",
	"agentworker_retry_task(uuid,integer,text,boolean)",
	"agentworker_answer_input(uuid,text,integer,text)",
	"agentworker_broadcast_tasks(text,uuid,text[],uuid[],jsonb,text,uuid,integer)",
	"agentworker_approve_task(uuid,integer,text)",
	"agentworker_reject_task(uuid,text,integer,text)",
	"agentworker_approve_tool_call(uuid,text,integer,text)",
	"agentworker_deny_tool_call(uuid,text,text,integer,text)",
	"agent_events(ai_tasks)",
	"ai_tasks(agent_events)",
}

// Outcomes of one probe.
const (
	outDenied = "denied" // SQLSTATE 42501: no privilege, or a policy refused the row
	outRows   = "rows"   // done, on at least one row
	outNone   = "none"   // allowed, but no row was visible
)

// Scopes of a probe: a row of the token's project, of another project, or
// of a relation that belongs to no project.
const (
	scopeOwn   = "own"
	scopeOther = "other"
	scopeAny   = "any"
)

// expected is the outcome access promises.
func expected(rel, role, op, scope string) string {
	for _, a := range access[rel][role] {
		name, own, _ := strings.Cut(a, ":")
		if name != op {
			continue
		}
		if own == "" || scope != scopeOther {
			return outRows
		}
		if op != "insert" { // another project's rows are invisible: nothing to read, change or delete
			return outNone
		}
		return outDenied
	}
	return outDenied
}

// claims is request.jwt.claims as PostgREST sets it for role, with the
// token naming project own.
func claims(role string, own uuid.UUID) string {
	c := map[string]any{"role": role, "sub": role + "-user", "exp": 4102444800}
	if role == "authenticated" {
		c["projects"] = []string{own.String()}
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// asRole switches the transaction to role with the request's claims, as
// PostgREST does at the start of every request.
func asRole(ctx context.Context, tx pgx.Tx, role, claims string) error {
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
		return fmt.Errorf("set role %s: %w", role, err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('request.jwt.claims', $1, true)", claims); err != nil {
		return fmt.Errorf("set claims of %s: %w", role, err)
	}
	return nil
}

// relation is a table or view of the schema, as the catalog describes it.
type relation struct {
	name    string
	kind    string   // r, p, v, m
	key     []string // primary key, or project_id for a view
	columns []string // insertable: not generated
	scoped  string   // "project_id", "task_id" or ""
}

func relations(t *testing.T, pool *pgxpool.Pool) []relation {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT c.relname, c.relkind::text,
		       coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord)
		                 FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		                 WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
		       (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
		        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
		ORDER BY c.relname`)
	if err != nil {
		t.Fatalf("list relations: %v", err)
	}
	var out []relation
	for rows.Next() {
		var r relation
		if err := rows.Scan(&r.name, &r.kind, &r.key, &r.columns); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"project_id", "task_id"} {
			if slices.Contains(r.columns, c) {
				r.scoped = c
				break
			}
		}
		if len(r.key) == 0 && r.scoped == "project_id" {
			r.key = []string{"project_id"}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sample returns one row of rel in scope as JSON (nil when there is none),
// read as the owner.
func sample(t *testing.T, pool *pgxpool.Pool, rel relation, scope string, own, other uuid.UUID) []byte {
	t.Helper()
	q := fmt.Sprintf("SELECT to_jsonb(r) FROM %s r", pgx.Identifier{rel.name}.Sanitize())
	var args []any
	if scope != scopeAny {
		project := own
		if scope == scopeOther {
			project = other
		}
		args = append(args, project)
		if rel.scoped == "project_id" {
			q += " WHERE project_id = $1"
		} else {
			q += " WHERE task_id IN (SELECT id FROM ai_tasks WHERE project_id = $1)"
		}
	}
	var row []byte
	err := pool.QueryRow(t.Context(), q+" LIMIT 1", args...).Scan(&row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatalf("sample %s (%s): %v", rel.name, scope, err)
	}
	return row
}

func idents(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(quoted, ", ")
}

// probe runs op on one row of rel as role and rolls it back. An insert
// first deletes the row as the owner, so that putting it back conflicts
// with nothing; it writes only the columns the role may write, if any.
func probe(ctx context.Context, pool *pgxpool.Pool, rel relation, role, claims, op string, row []byte) (string, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	name := pgx.Identifier{rel.name}.Sanitize()
	match := "false"
	if row != nil && len(rel.key) > 0 {
		match = fmt.Sprintf("(%s) = (SELECT %s FROM jsonb_populate_record(NULL::%s, $1::jsonb))", idents(rel.key), idents(rel.key), name)
	}
	args := []any{string(row)}
	if match == "false" { // no row, or a relation without a key (a view)
		args = nil
	}
	writable := func(priv string) []string {
		var cols []string
		for _, c := range rel.columns {
			var ok bool
			if err := tx.QueryRow(ctx, "SELECT has_column_privilege($1, $2::regclass, $3, $4)", role, name, c, priv).Scan(&ok); err == nil && ok {
				cols = append(cols, c)
			}
		}
		if len(cols) == 0 {
			return rel.columns
		}
		return cols
	}

	var q string
	switch op {
	case "select":
		q = fmt.Sprintf("SELECT 1 FROM %s WHERE %s", name, match)
		if match == "false" {
			q = "SELECT 1 FROM " + name
		}
	case "insert":
		if row != nil {
			if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", name, match), args...); err != nil {
				return "", fmt.Errorf("delete the %s row as owner: %w", rel.name, err)
			}
			cols := idents(writable("INSERT"))
			q = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM jsonb_populate_record(NULL::%s, $1::jsonb)", name, cols, cols, name)
		} else {
			q = fmt.Sprintf("INSERT INTO %s DEFAULT VALUES", name)
		}
	case "update":
		col := pgx.Identifier{writable("UPDATE")[0]}.Sanitize()
		q = fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", name, col, col, match)
	case "delete":
		q = fmt.Sprintf("DELETE FROM %s WHERE %s", name, match)
	}
	if err := asRole(ctx, tx, role, claims); err != nil {
		return "", err
	}
	tag, err := tx.Exec(ctx, q, args...)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return outDenied, nil
	case err != nil:
		return "", fmt.Errorf("%s: %w", q, err)
	case tag.RowsAffected() > 0:
		return outRows, nil
	}
	return outNone, nil
}

// isolationFixture holds two projects, each with a task and a row in every
// table that hangs off a task.
type isolationFixture struct {
	own, other         uuid.UUID // project ids
	ownTask, otherTask uuid.UUID
}

func seedIsolation(t *testing.T, pool *pgxpool.Pool) isolationFixture {
	t.Helper()
	f := isolationFixture{own: uuid.New(), other: uuid.New()}
	for _, p := range []struct {
		project uuid.UUID
		task    *uuid.UUID
	}{{f.own, &f.ownTask}, {f.other, &f.otherTask}} {
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(t.Context(), `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'build', 'seed') RETURNING id`,
				p.project).Scan(p.task); err != nil {
				return err
			}
			for _, q := range []string{
				`INSERT INTO task_runs (task_id, attempt, idempotency_key, status, tokens_in, cost) VALUES ($1, 1, gen_random_uuid()::text, 'running', 10, 0.01)`,
				`INSERT INTO agent_events (task_id, project_id, type, payload) VALUES ($1, $2, 'log', '{"message": "seed"}')`,
				`INSERT INTO inbox_items (project_id, task_id, kind, title) VALUES ($2, $1, 'await_user_input', 'seed')`,
				`INSERT INTO task_checkpoints (task_id, attempt, iteration, messages, state) VALUES ($1, 1, 1, '[{"role": "user"}]', '{}')`,
				`INSERT INTO change_sets (task_id, project_id) VALUES ($1, $2)`,
				`INSERT INTO change_set_entries (task_id, path, op, content, ord) VALUES ($1, 'a.txt', 'write', 'secret', 1)`,
				`INSERT INTO build_decisions (task_id, decision_id, status) VALUES ($1, 'step-1', 'accepted')`,
				`INSERT INTO task_comments (task_id, project_id, author, body) VALUES ($1, $2, 'seed', 'seed')`,
				`INSERT INTO usage_rollup (project_id, day, usage_day, model, stopped, runs)
				 SELECT $2, current_date, current_date, coalesce((SELECT model FROM ai_tasks WHERE id = $1), 'seed'), true, 1`,
				`INSERT INTO documents (project_id, path, etag) SELECT $2, 'docs/' || $1::text || '.md', 'seed'`,
				`INSERT INTO tool_approvals (task_id, tool_call_id, project_id, tool_name, arguments) VALUES ($1, 'call_seed', $2, 'write_file', '{}')`,
				`INSERT INTO project_settings (project_id, max_cost_usd_per_day) SELECT $2, 5 WHERE $1::uuid IS NOT NULL`,
				`UPDATE ai_tasks SET cost = 0.01 WHERE id = $1`,
			} {
				args := []any{*p.task}
				if strings.Contains(q, "$2") {
					args = append(args, p.project)
				}
				if _, err := tx.Exec(t.Context(), q, args...); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			// An agent, and an edge between two tasks of their own, inserted
			// after the task the probes of ai_tasks take (the first row).
			for _, q := range []string{
				`INSERT INTO agents (project_id, name) VALUES ($1, 'seed')`,
				`INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'dependency'), ($1, 'chat', 'dependent')`,
				`INSERT INTO task_dependencies (task_id, depends_on_task_id)
				 SELECT w.id, d.id FROM ai_tasks w, ai_tasks d
				 WHERE w.project_id = $1 AND w.prompt = 'dependent' AND d.project_id = $1 AND d.prompt = 'dependency'`,
				// A child of the seeded task, deleted: its tree keeps its spend.
				`INSERT INTO ai_tasks (project_id, type, prompt, parent_task_id) SELECT $1, 'chat', 'tree child', id FROM ai_tasks WHERE project_id = $1 AND prompt = 'seed'`,
				`DELETE FROM ai_tasks WHERE project_id = $1 AND prompt = 'tree child'`,
			} {
				if _, err := tx.Exec(t.Context(), q, p.project); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed project %s: %v", p.project, err)
		}
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO audit_log (actor, action, resource, reason) VALUES ('seed', 'GET /v1/tasks/{id}', '/v1/tasks/x', 'forbidden')`); err != nil {
		t.Fatalf("seed audit log: %v", err)
	}
	// usage_daily counts runs that stopped: end the own project's run.
	if _, err := pool.Exec(t.Context(), `UPDATE task_runs SET status = 'succeeded', finished_at = now() WHERE task_id = $1`, f.ownTask); err != nil {
		t.Fatalf("finish seeded run: %v", err)
	}
	return f
}

// checkIsolation is the whole check, on a migrated database: the catalog,
// every relation × API role × operation, and the control functions.
func checkIsolation(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	f := seedIsolation(t, pool)
	rels := relations(t, pool)
	t.Run("Catalog", func(t *testing.T) { checkCatalog(t, pool, rels) })
	t.Run("Matrix", func(t *testing.T) { checkMatrix(t, pool, rels, f) })
	t.Run("ControlFunctions", func(t *testing.T) { checkControl(t, pool, f) })
	t.Run("AppInsertIsPickedUp", func(t *testing.T) { checkPickup(t, pool, f) })
	t.Run("NewAppRoles", func(t *testing.T) { checkAppRoles(t, pool, f) })
}

// checkAppRoles grants two roles of an app as docs/security.md says: one
// that acts for the tenants its claims name, one for every project.
// Roles belong to the cluster: created if missing, never dropped.
func checkAppRoles(t *testing.T, pool *pgxpool.Pool, f isolationFixture) {
	ctx := t.Context()
	for _, q := range []string{
		`CREATE ROLE agentworker_test_tenant_app NOLOGIN`,
		`GRANT authenticated TO agentworker_test_tenant_app`,
		`CREATE ROLE agentworker_test_backend_app NOLOGIN`,
		`GRANT service_role TO agentworker_test_backend_app`,
	} {
		if _, err := pool.Exec(ctx, `DO $$ BEGIN `+q+`; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tenant := `{"projects": ["` + f.own.String() + `"]}`
	for _, tt := range []struct {
		role     string
		claims   string
		projects int    // projects whose tasks the role reads
		other    string // outcome of cancelling the other project's task
	}{
		{"agentworker_test_tenant_app", tenant, 1, "not_found"},
		{"agentworker_test_backend_app", `{}`, 2, "applied|rejected"},
	} {
		var projects int
		var raw []byte
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := asRole(ctx, tx, tt.role, tt.claims); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT count(DISTINCT project_id) FROM ai_tasks WHERE project_id IN ($1, $2)`, f.own, f.other).Scan(&projects); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT agentworker_cancel_task(task_id => $1) ->> 'outcome'`, f.otherTask).Scan(&raw)
		})
		if err != nil {
			t.Fatalf("as %s: %v", tt.role, err)
		}
		if projects != tt.projects || !slices.Contains(strings.Split(tt.other, "|"), string(raw)) {
			t.Errorf("as %s: read tasks of %d projects, cancel another project's task: %s; want %d, %s", tt.role, projects, raw, tt.projects, tt.other)
		}
	}
}

func checkCatalog(t *testing.T, pool *pgxpool.Pool, rels []relation) {
	ctx := t.Context()
	for _, rel := range rels {
		if rel.kind == "r" || rel.kind == "p" {
			var rls bool
			if err := pool.QueryRow(ctx, `SELECT relrowsecurity FROM pg_class WHERE oid = $1::regclass`, rel.name).Scan(&rls); err != nil {
				t.Fatal(err)
			}
			if !rls {
				t.Errorf("table %s: row level security is off", rel.name)
			}
		}
		if rel.kind == "v" && access[rel.name] != nil {
			var invoker bool
			if err := pool.QueryRow(ctx, `SELECT coalesce('security_invoker=true' = ANY (reloptions), false) FROM pg_class WHERE oid = $1::regclass`,
				rel.name).Scan(&invoker); err != nil {
				t.Fatal(err)
			}
			if !invoker {
				t.Errorf("view %s is read by apps but not security_invoker: its tables' policies would not apply", rel.name)
			}
		}
		for _, role := range apiRoles {
			// What the matrix cannot probe: rights no API role ever needs,
			// and writes through a view.
			privs := "TRUNCATE, REFERENCES, TRIGGER"
			if rel.kind != "r" && rel.kind != "p" {
				privs += ", INSERT, UPDATE, DELETE"
			}
			var has bool
			if err := pool.QueryRow(ctx, `SELECT has_table_privilege($1, $2::regclass, $3)`, role, rel.name, privs).Scan(&has); err != nil {
				t.Fatal(err)
			}
			if has {
				t.Errorf("%s has one of %s on %s", role, privs, rel.name)
			}
		}
	}

	rows, err := pool.Query(ctx, `
		SELECT s.relname, r.rolname
		FROM pg_class s CROSS JOIN pg_roles r
		WHERE s.relnamespace = current_schema()::regnamespace AND s.relkind = 'S'
		  AND r.rolname = ANY ($1) AND has_sequence_privilege(r.rolname, s.oid, 'USAGE, SELECT, UPDATE')`, apiRoles)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Seq, Role string }])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		t.Errorf("%s may use sequence %s", s.Role, s.Seq)
	}

	type function struct {
		Sig        string
		Public     bool
		Grantees   []string
		Definer    bool
		SearchPath string
	}
	rows, err = pool.Query(ctx, `
		SELECT p.oid::regprocedure::text,
		       EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		               WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
		       coalesce((SELECT array_agg(r.rolname::text ORDER BY r.rolname) FROM pg_roles r
		                 WHERE r.rolname = ANY ($1) AND has_function_privilege(r.oid, p.oid, 'EXECUTE')), '{}'),
		       p.prosecdef,
		       coalesce((SELECT substr(c, 13) FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%'), '')
		FROM pg_proc p
		WHERE p.pronamespace = current_schema()::regnamespace
		ORDER BY 1`, apiRoles)
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[function])
	if err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	pinned := schema + ", pg_temp"
	for _, fn := range funcs {
		if fn.Public {
			t.Errorf("function %s: EXECUTE is granted to PUBLIC", fn.Sig)
		}
		want := []string{}
		if slices.Contains(apiFunctions, fn.Sig) {
			want = []string{"authenticated", "service_role"}
		}
		if !slices.Equal(fn.Grantees, want) {
			t.Errorf("function %s: executable by %v, want %v", fn.Sig, fn.Grantees, want)
		}
		if !strings.HasPrefix(fn.Sig, "river_") && fn.SearchPath != pinned {
			t.Errorf("function %s: search_path %q, want %q", fn.Sig, fn.SearchPath, pinned)
		}
		if fn.Definer && fn.SearchPath != pinned {
			t.Errorf("SECURITY DEFINER function %s: search_path %q, want %q", fn.Sig, fn.SearchPath, pinned)
		}
	}
	for _, sig := range apiFunctions {
		if !slices.ContainsFunc(funcs, func(fn function) bool { return fn.Sig == sig }) {
			t.Errorf("API function %s does not exist", sig)
		}
	}
}

func checkMatrix(t *testing.T, pool *pgxpool.Pool, rels []relation, f isolationFixture) {
	ops := []string{"select", "insert", "update", "delete"}
	var table []string // one line per relation and role: each op's outcome by scope
	for _, rel := range rels {
		relOps := ops
		if rel.kind != "r" && rel.kind != "p" {
			relOps = ops[:1] // writes through views: checkCatalog
		}
		scopes := []string{scopeOwn, scopeOther}
		if rel.scoped == "" {
			scopes = []string{scopeAny}
		}
		got := map[string][]string{} // role/op → outcome per scope
		for _, scope := range scopes {
			row := sample(t, pool, rel, scope, f.own, f.other)
			for _, role := range apiRoles {
				for _, op := range relOps {
					out, err := probe(t.Context(), pool, rel, role, claims(role, f.own), op, row)
					if err != nil {
						t.Errorf("%s %s %s (%s row): %v", role, op, rel.name, scope, err)
						continue
					}
					if want := expected(rel.name, role, op, scope); out != want {
						t.Errorf("%s %s %s (%s row) = %s, want %s", role, op, rel.name, scope, out, want)
					}
					got[role+"/"+op] = append(got[role+"/"+op], out)
				}
			}
		}
		for _, role := range apiRoles {
			line := fmt.Sprintf("| %s | %s |", rel.name, role)
			for _, op := range ops {
				line += " " + cmp.Or(strings.Join(got[role+"/"+op], " / "), "n/a") + " |"
			}
			table = append(table, line)
		}
	}
	if testing.Verbose() {
		t.Logf("outcomes (own row / other project's row, or any row):\n| relation | role | select | insert | update | delete |\n|---|---|---|---|---|---|\n%s",
			strings.Join(table, "\n"))
	}
}

// checkControl calls the control functions as each role on a task of the
// token's project, of another project, and on none at all.
func checkControl(t *testing.T, pool *pgxpool.Pool, f isolationFixture) {
	ctx := t.Context()
	missing := uuid.New()
	call := func(t *testing.T, role, fn string, id uuid.UUID) (string, map[string]any) {
		t.Helper()
		args := "task_id => $1"
		if fn == "agentworker_answer_input" {
			args += ", answer => 'yes'"
		}
		var raw []byte
		// Committed, so that an event a refused call wrote would show.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := asRole(ctx, tx, role, claims(role, f.own)); err != nil {
				return err
			}
			return tx.QueryRow(ctx, fmt.Sprintf("SELECT %s(%s)", fn, args), id).Scan(&raw)
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			return outDenied, nil
		}
		if err != nil {
			t.Fatalf("%s as %s: %v", fn, role, err)
		}
		var res map[string]any
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return res["outcome"].(string), res
	}
	events := func(task uuid.UUID) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM agent_events WHERE task_id = $1`, task).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	fns := []string{"agentworker_cancel_task", "agentworker_pause_task", "agentworker_resume_task", "agentworker_retry_task", "agentworker_answer_input"}
	for _, fn := range fns {
		for _, tt := range []struct {
			role                    string
			own, other, missingTask string
		}{
			{"anon", outDenied, outDenied, outDenied},
			// A queued task: cancel and pause apply; resume, retry and
			// answer are refused by the state machine, which shows the
			// task was found.
			{"authenticated", "applied|rejected", "not_found", "not_found"},
			{"service_role", "applied|rejected", "applied|rejected", "not_found"},
		} {
			t.Run(fn+"/"+tt.role, func(t *testing.T) {
				before := events(f.otherTask)
				for _, c := range []struct {
					task uuid.UUID
					want string
				}{{f.ownTask, tt.own}, {f.otherTask, tt.other}, {missing, tt.missingTask}} {
					got, res := call(t, tt.role, fn, c.task)
					if !slices.Contains(strings.Split(c.want, "|"), got) {
						t.Errorf("%s(%s) as %s = %s %v, want %s", fn, c.task, tt.role, got, res, c.want)
					}
				}
				if tt.role != "authenticated" {
					return
				}
				// Another project's task is answered exactly as a missing one.
				_, other := call(t, tt.role, fn, f.otherTask)
				_, none := call(t, tt.role, fn, missing)
				otherJSON, _ := json.Marshal(other)
				noneJSON, _ := json.Marshal(none)
				if strings.ReplaceAll(string(otherJSON), f.otherTask.String(), missing.String()) != string(noneJSON) {
					t.Errorf("another project's task: %s; a missing task: %s", otherJSON, noneJSON)
				}
				if after := events(f.otherTask); after != before {
					t.Errorf("refused call wrote %d events on another project's task", after-before)
				}
			})
		}
	}

	// The internal functions are the owner's.
	for _, q := range []string{
		`SELECT agentworker_control_task($1, 'cancel')`,
		`SELECT agentworker_control_for_caller($1, 'cancel', NULL, NULL)`,
		`SELECT agentworker_enqueue_task($1)`,
		`SELECT * FROM agentworker_take_over_lapsed(10) WHERE $1::uuid IS NOT NULL`,
	} {
		for _, role := range apiRoles {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := asRole(ctx, tx, role, claims(role, f.own)); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, q, f.ownTask)
				return err
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
				t.Errorf("%s as %s: %v, want permission denied", q, role, err)
			}
		}
	}
}

// checkPickup inserts a task as an app would: the pickup trigger, which
// writes River's table the app may not see, still enqueues it.
func checkPickup(t *testing.T, pool *pgxpool.Pool, f isolationFixture) {
	ctx := t.Context()
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := asRole(ctx, tx, "authenticated", claims("authenticated", f.own)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO ai_tasks (project_id, type, prompt) VALUES ($1, 'chat', 'hi') RETURNING id`, f.own).Scan(&id)
	})
	if err != nil {
		t.Fatalf("insert as authenticated: %v", err)
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'ai_task' AND args ->> 'task_id' = $1`, id.String()).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Errorf("river jobs for the app's task = %d, want 1", jobs)
	}
}

// TestIsolation runs the check on the database every test gets: plain
// Postgres, with the roles the migration created if nobody had.
func TestIsolation(t *testing.T) {
	t.Parallel()
	checkIsolation(t, dbtest.New(t))
}

// supabaseSetup prepares a database as Supabase does before any migration:
// the API roles exist, and whatever is created in public is granted to
// them by default. Roles belong to the cluster: they are created only if
// missing, concurrently with other test processes, and never dropped.
const supabaseSetup = `
DO $$
DECLARE v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['anon', 'authenticated', 'service_role'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN NOINHERIT', v_role);
            IF v_role = 'service_role' THEN
                ALTER ROLE service_role BYPASSRLS;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA public TO anon, authenticated, service_role;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO anon, authenticated, service_role;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON FUNCTIONS TO anon, authenticated, service_role;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON SEQUENCES TO anon, authenticated, service_role;
CREATE PUBLICATION supabase_realtime;
`

// freshDatabase is an empty database on the test server, dropped when the
// test ends, and a pool on it.
func freshDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return openPool(t, dbtest.NewEmptyURL(t))
}

func TestIsolationSupabaseDefaultPrivileges(t *testing.T) {
	t.Parallel()
	pool := freshDatabase(t)
	if _, err := pool.Exec(t.Context(), supabaseSetup); err != nil {
		t.Fatalf("supabase setup: %v", err)
	}
	if err := agentsql.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	checkIsolation(t, pool)
}

// TestIsolationCreatesRoles migrates a cluster of its own, where the API
// roles do not exist: the migration creates them NOLOGIN.
func TestIsolationCreatesRoles(t *testing.T) {
	t.Parallel()
	cluster := dbtest.PrivateCluster(t)
	pool, err := pgxpool.New(t.Context(), cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	roles := func() []string {
		t.Helper()
		rows, err := pool.Query(t.Context(), `SELECT rolname || CASE WHEN rolcanlogin THEN ' login' ELSE ' nologin' END
			FROM pg_roles WHERE rolname = ANY ($1)`, apiRoles)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		return got
	}
	if got := roles(); len(got) != 0 {
		t.Fatalf("a new cluster has %v", got)
	}
	if err := agentsql.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if got, want := roles(), []string{"anon nologin", "authenticated nologin", "service_role nologin"}; !slices.Equal(got, want) {
		t.Fatalf("roles after migrating = %v, want %v", got, want)
	}
	checkIsolation(t, pool)
}
