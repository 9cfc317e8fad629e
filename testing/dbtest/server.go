package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"

	"github.com/agentworker/agentworker/internal/devenv/localpg"
	agentsql "github.com/agentworker/agentworker/sql"
)

// errNoServer means no PostgreSQL server is available: tests skip, unless
// CI=true.
var errNoServer = errors.New("no PostgreSQL server")

const (
	// localURL is the server tried when TEST_DATABASE_URL is not set.
	localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// localTimeout bounds the attempt to connect to localURL.
	localTimeout = 2 * time.Second
	// containerImage is the image started when a Docker engine is reachable.
	containerImage = "postgres:15-alpine"

	templatePrefix = "agentworker_tmpl_"
	testPrefix     = "agentworker_test_"
)

// Queries on the admin database. The advisory lock key is (a hash of
// "agentworker/dbtest", a hash of the process tag).
const (
	lockTagSQL    = `SELECT pg_advisory_lock(hashtext('agentworker/dbtest'), hashtext($1))`
	tryLockTagSQL = `SELECT pg_try_advisory_lock(hashtext('agentworker/dbtest'), hashtext($1))`
	// ownDatabasesSQL lists the databases that look like ours and that the
	// current role owns, so it may drop them.
	ownDatabasesSQL = `
		SELECT datname FROM pg_database
		WHERE (datname LIKE 'agentworker\_tmpl\_%' OR datname LIKE 'agentworker\_test\_%')
		  AND datdba = (SELECT oid FROM pg_roles WHERE rolname = current_user)`
)

// dbNameRE matches the names of the databases dbtest creates and captures the
// process tag in them.
var dbNameRE = regexp.MustCompile(`^agentworker_(?:tmpl|test)_([0-9]+_[0-9a-f]+)(?:_[0-9]+)?$`)

// backend is a server to create test databases on.
type backend struct {
	// name says where the server comes from, for messages.
	name string
	// adminURL is a postgres:// URL to an existing database, as a role that
	// may CREATE DATABASE.
	adminURL string
	// stop stops the server if dbtest started it; nil otherwise.
	stop func(context.Context) error
	// leakOptions are goleak options for goroutines the backend leaves
	// running until the process exits.
	leakOptions []goleak.Option
}

// server creates and drops the test databases of this process.
type server struct {
	backend

	// tag is in the name of every database this process creates.
	tag      string
	template string
	// lockConn holds the session advisory lock on tag; it runs no queries
	// after taking it.
	lockConn *pgx.Conn

	// createMu serializes copies of the template: PostgreSQL refuses to copy
	// a database that another session is using, and a concurrent copy counts.
	createMu sync.Mutex
	seq      atomic.Int64
}

// startServer picks a backend, then prepares the template database on it.
func startServer(ctx context.Context, getenv func(string) string) (*server, error) {
	b, err := pickBackend(ctx, getenv)
	if err != nil {
		return nil, err
	}
	srv, err := newServer(ctx, b)
	if err != nil {
		if b.stop != nil {
			// ctx may be what ran out.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if stopErr := b.stop(stopCtx); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("stop %s: %w", b.name, stopErr))
			}
		}
		return nil, err
	}
	return srv, nil
}

// pickBackend returns the first available server, in the order the package
// documentation gives, or an error wrapping errNoServer that says what was
// tried.
func pickBackend(ctx context.Context, getenv func(string) string) (backend, error) {
	if u := getenv("TEST_DATABASE_URL"); u != "" {
		return backend{name: "TEST_DATABASE_URL", adminURL: u}, nil
	}
	tried := []string{"TEST_DATABASE_URL is not set"}

	err := ping(ctx, localURL, localTimeout)
	if err == nil {
		return backend{name: "local server", adminURL: localURL}, nil
	}
	tried = append(tried, fmt.Sprintf("no server at 127.0.0.1:5432 (%v)", err))

	err = dockerReachable(ctx)
	if err == nil {
		return startContainer(ctx)
	}
	tried = append(tried, fmt.Sprintf("no Docker engine (%v)", err))

	b, err := startPrivateCluster(ctx)
	if errors.Is(err, localpg.ErrNotInstalled) {
		tried = append(tried, err.Error())
		return backend{}, fmt.Errorf("%w: %s; set TEST_DATABASE_URL or install PostgreSQL", errNoServer, strings.Join(tried, "; "))
	}
	return b, err
}

func ping(ctx context.Context, connString string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// dockerReachable reports whether testcontainers finds a Docker engine that
// answers. testcontainers panics when it finds no Docker host at all.
func dockerReachable(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		return err
	}
	return nil
}

func startContainer(ctx context.Context) (backend, error) {
	ctr, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return backend{}, errors.Join(
			fmt.Errorf("start container %s: %w", containerImage, err),
			testcontainers.TerminateContainer(ctr),
		)
	}
	adminURL, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return backend{}, errors.Join(
			fmt.Errorf("address of container %s: %w", containerImage, err),
			testcontainers.TerminateContainer(ctr),
		)
	}
	return backend{
		name:     "container " + containerImage,
		adminURL: adminURL,
		stop: func(ctx context.Context) error {
			return testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx))
		},
		// The connection to the Ryuk reaper stays open until the process
		// exits, so that Ryuk removes the container if the process dies;
		// so do the Docker client's idle HTTP connections.
		leakOptions: []goleak.Option{
			goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		},
	}, nil
}

func startPrivateCluster(ctx context.Context) (backend, error) {
	// Nobody reads this cluster's lifecycle messages; errors are returned.
	c, err := localpg.Start(ctx, localpg.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return backend{}, fmt.Errorf("start private cluster: %w", err)
	}
	return backend{name: "private cluster", adminURL: c.URL("postgres"), stop: c.Stop}, nil
}

// newServer takes the advisory lock on a new process tag, drops the
// databases of dead processes and creates the migrated template.
func newServer(ctx context.Context, b backend) (*server, error) {
	if _, err := databaseURL(b.adminURL, "postgres"); err != nil {
		return nil, fmt.Errorf("%s: %w", b.name, err)
	}

	tag := newTag(os.Getpid())
	lockConn, err := pgx.Connect(ctx, b.adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", b.name, err)
	}
	if _, err := lockConn.Exec(ctx, lockTagSQL, tag); err != nil {
		return nil, errors.Join(fmt.Errorf("lock tag %s on %s: %w", tag, b.name, err), lockConn.Close(ctx))
	}
	srv := &server{backend: b, tag: tag, template: templatePrefix + tag, lockConn: lockConn}

	if err := srv.dropDeadDatabases(ctx); err != nil {
		return nil, errors.Join(err, lockConn.Close(ctx))
	}
	if err := srv.createTemplate(ctx); err != nil {
		return nil, errors.Join(err, lockConn.Close(ctx))
	}
	return srv, nil
}

// newTag returns a process tag: the process id, which helps a human tell
// whose databases these are, and a random suffix, which makes it unique across
// hosts and restarts.
func newTag(pid int) string {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix) // never fails
	return fmt.Sprintf("%d_%s", pid, hex.EncodeToString(suffix))
}

// dropDeadDatabases drops the databases of processes that no longer hold the
// lock on their tag, and that the role owns.
func (s *server) dropDeadDatabases(ctx context.Context) error {
	// Locks taken here are released when the connection closes.
	return s.withAdmin(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, ownDatabasesSQL)
		if err != nil {
			return fmt.Errorf("list databases on %s: %w", s.name, err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list databases on %s: %w", s.name, err)
		}

		free := map[string]bool{} // tag → its process is gone
		for _, name := range names {
			m := dbNameRE.FindStringSubmatch(name)
			if m == nil || m[1] == s.tag {
				continue
			}
			tag := m[1]
			if _, seen := free[tag]; !seen {
				var locked bool
				if err := conn.QueryRow(ctx, tryLockTagSQL, tag).Scan(&locked); err != nil {
					return fmt.Errorf("check tag %s on %s: %w", tag, s.name, err)
				}
				free[tag] = locked
			}
			if free[tag] {
				if err := dropDatabase(ctx, conn, name); err != nil {
					return fmt.Errorf("drop database %s of a dead process on %s: %w", name, s.name, err)
				}
			}
		}
		return nil
	})
}

// createTemplate creates the template database and migrates it, leaving no
// connection to it open.
func (s *server) createTemplate(ctx context.Context) error {
	err := s.withAdmin(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.template}.Sanitize())
		return err
	})
	if err != nil {
		return fmt.Errorf("create template database %s on %s: %w", s.template, s.name, err)
	}

	pool, err := pgxpool.New(ctx, s.url(s.template))
	if err == nil {
		err = agentsql.Migrate(ctx, pool)
		pool.Close()
	}
	if err != nil {
		err = fmt.Errorf("migrate template database %s on %s: %w", s.template, s.name, err)
		if dropErr := s.dropDatabase(ctx, s.template); dropErr != nil {
			err = errors.Join(err, dropErr)
		}
		return err
	}
	return nil
}

// createDatabaseFrom copies template (template0: an empty database) into a
// new database and returns its name.
func (s *server) createDatabaseFrom(ctx context.Context, template string) (string, error) {
	name := fmt.Sprintf("%s%s_%d", testPrefix, s.tag, s.seq.Add(1))

	s.createMu.Lock()
	defer s.createMu.Unlock()
	err := s.withAdmin(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
			" TEMPLATE "+pgx.Identifier{template}.Sanitize())
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create database %s from template %s on %s: %w", name, template, s.name, err)
	}
	return name, nil
}

// dropDatabase drops the database, disconnecting whoever is still connected.
func (s *server) dropDatabase(ctx context.Context, name string) error {
	err := s.withAdmin(ctx, func(conn *pgx.Conn) error { return dropDatabase(ctx, conn, name) })
	if err != nil {
		return fmt.Errorf("drop database %s on %s: %w", name, s.name, err)
	}
	return nil
}

func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// close drops the template and any test database of this process left
// behind, releases the tag and stops the backend if dbtest started it.
func (s *server) close(ctx context.Context) error {
	var errs []error
	err := s.withAdmin(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, ownDatabasesSQL)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range names {
			if m := dbNameRE.FindStringSubmatch(name); m != nil && m[1] == s.tag {
				if err := dropDatabase(ctx, conn, name); err != nil {
					return fmt.Errorf("drop database %s: %w", name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("drop databases of tag %s on %s: %w", s.tag, s.name, err))
	}
	if err := s.lockConn.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("release tag %s on %s: %w", s.tag, s.name, err))
	}
	if s.stop != nil {
		if err := s.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// withAdmin runs fn on a new connection to the admin database. A connection
// per operation keeps no goroutine or session around between tests, and
// the operations are rare enough.
func (s *server) withAdmin(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	return errors.Join(fn(conn), conn.Close(ctx))
}

// url returns the connection string of database name on the server.
func (s *server) url(name string) string {
	u, err := databaseURL(s.adminURL, name)
	if err != nil {
		panic(err) // newServer checked adminURL
	}
	return u
}

// databaseURL returns adminURL with its database replaced by name.
func databaseURL(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", redact(adminURL), err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("%q is not a postgres:// URL", redact(adminURL))
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// redact hides the password in a connection URL, for messages.
func redact(connString string) string {
	u, err := url.Parse(connString)
	if err != nil {
		return "(unparsable connection string)"
	}
	return u.Redacted()
}
