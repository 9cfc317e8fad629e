package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates the bucket of an S3 store. Its String and LogValue
// methods leave the secret key out.
type S3Config struct {
	// Endpoint is the server as host[:port], without a scheme, for example
	// "localhost:9000" or "s3.eu-west-1.amazonaws.com". Required.
	Endpoint string
	// AccessKey is the access key id. Empty with SecretKey means anonymous
	// requests. Defaults to empty.
	AccessKey string
	// SecretKey is the secret access key. Defaults to empty.
	SecretKey string
	// Bucket holds every project, one key prefix per project. NewS3 creates
	// it when it does not exist. Required.
	Bucket string
	// Region of the bucket. Defaults to empty: the client asks the server
	// (MinIO answers "us-east-1"), and a bucket NewS3 creates is made in
	// "us-east-1".
	Region string
	// UseSSL selects https over http. Defaults to false.
	UseSSL bool
	// RetryFor is how long a call keeps retrying a store it cannot reach
	// (refused or reset connections, timeouts, 5xx answers, throttling),
	// with a backoff growing to a second, before it fails with
	// ErrUnavailable. Defaults to 20 seconds.
	RetryFor time.Duration
}

// DefaultS3RetryFor is S3Config.RetryFor's default.
const DefaultS3RetryFor = 20 * time.Second

// String describes the config without the secret key.
func (c S3Config) String() string {
	return fmt.Sprintf("{Endpoint:%s AccessKey:%s SecretKey:%s Bucket:%s Region:%s UseSSL:%t RetryFor:%s}",
		c.Endpoint, c.AccessKey, redact(c.SecretKey), c.Bucket, c.Region, c.UseSSL, c.RetryFor)
}

// LogValue implements slog.LogValuer without the secret key.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("access_key", c.AccessKey),
		slog.String("secret_key", redact(c.SecretKey)),
		slog.String("bucket", c.Bucket),
		slog.String("region", c.Region),
		slog.Bool("use_ssl", c.UseSSL),
		slog.Duration("retry_for", c.RetryFor),
	)
}

func redact(secret string) string {
	if secret == "" {
		return ""
	}
	return "REDACTED"
}

// S3 stores project files as objects "<project_id>/<path>" in one S3 bucket
// (AWS S3, MinIO or any compatible server), through minio-go. The ETag is
// the server's ETag without quotes.
//
// S3 has no rename: Move copies server side, then deletes the source. Move
// and Delete check existence first, so they are not atomic with respect to
// concurrent writers of the same key.
//
// Every request that finds the store unreachable is retried by the store
// itself, for S3Config.RetryFor, then fails with ErrUnavailable: a caller
// sees an outage only once it outlasted the bound.
type S3 struct {
	client    *minio.Client
	transport *http.Transport
	bucket    string
	retryFor  time.Duration
}

var _ Store = (*S3)(nil)

// NewS3 connects to the bucket described by cfg, creating the bucket when it
// does not exist. Close releases the idle connections.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("new s3 store: endpoint is required")
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("new s3 store at %s: bucket is required", cfg.Endpoint)
	}
	transport, err := minio.DefaultTransport(cfg.UseSSL)
	if err != nil {
		return nil, fmt.Errorf("new s3 store at %s: %w", cfg.Endpoint, err)
	}
	// Searches read many small objects at once: keep their connections
	// (minio-go keeps 16) rather than dial again each time.
	transport.MaxIdleConnsPerHost = 64
	// One try a request: the store's own retry (retry) is the one that
	// bounds an outage, by time rather than by a count of quick tries.
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     cfg.UseSSL,
		Region:     cfg.Region,
		Transport:  transport,
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("new s3 store at %s: %w", cfg.Endpoint, err)
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = DefaultS3RetryFor
	}
	s := &S3{client: client, transport: transport, bucket: cfg.Bucket, retryFor: cfg.RetryFor}
	if err := s.ensureBucket(ctx, cfg.Region); err != nil {
		s.transport.CloseIdleConnections()
		return nil, fmt.Errorf("new s3 store at %s: %w", cfg.Endpoint, err)
	}
	return s, nil
}

func (s *S3) ensureBucket(ctx context.Context, region string) error {
	var ok bool
	err := s.retry(ctx, func() (err error) {
		ok, err = s.client.BucketExists(ctx, s.bucket)
		return err
	})
	if err != nil {
		return fmt.Errorf("check bucket %q: %w", s.bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.retry(ctx, func() error {
		return s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region})
	}); err != nil {
		// Another replica may have created it since we looked.
		if ok, recheck := s.client.BucketExists(ctx, s.bucket); recheck == nil && ok {
			return nil
		}
		return fmt.Errorf("create bucket %q: %w", s.bucket, err)
	}
	return nil
}

// Close releases idle connections. The store must not be used afterwards.
func (s *S3) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// Ping reports whether the bucket is reachable, for readiness checks.
func (s *S3) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("ping s3 bucket %q: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("ping s3 bucket %q: bucket does not exist", s.bucket)
	}
	return nil
}

// Read implements Store.
func (s *S3) Read(ctx context.Context, projectID, p string) ([]byte, FileInfo, error) {
	key, clean, err := objectKey(ctx, projectID, p)
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read %q in project %q: %w", p, projectID, err)
	}
	content, oi, err := s.get(ctx, key)
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		tooLarge.Path = clean
		return nil, FileInfo{}, tooLarge
	}
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read %q in project %q: %w", p, projectID, err)
	}
	return content, fileInfo(clean, oi), nil
}

// get fetches an object with a single GET, so that the content and the info
// describe the same version even while it is being overwritten.
func (s *S3) get(ctx context.Context, key string) (content []byte, oi minio.ObjectInfo, err error) {
	err = s.retry(ctx, func() error {
		content, oi, err = s.getOnce(ctx, key)
		return err
	})
	return content, oi, s3Error(err)
}

func (s *S3) getOnce(ctx context.Context, key string) ([]byte, minio.ObjectInfo, error) {
	body, oi, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	defer body.Close()
	// The answer's headers tell the size: a file over the read's bound is
	// refused before its body is read (closing it unread drops the
	// connection, a price paid only for refused files).
	if err := checkReadLimit(ctx, key, oi.Size); err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	content, err := io.ReadAll(body)
	if err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	if int64(len(content)) != oi.Size {
		return nil, minio.ObjectInfo{}, fmt.Errorf("got %d bytes of %d: %w", len(content), oi.Size, io.ErrUnexpectedEOF)
	}
	return content, oi, nil
}

// Write implements Store.
func (s *S3) Write(ctx context.Context, projectID, p string, content []byte) (FileInfo, error) {
	key, clean, err := objectKey(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q: %w", p, projectID, err)
	}
	info, err := s.put(ctx, key, clean, content, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q: %w", p, projectID, err)
	}
	return info, nil
}

// put uploads content to key. Errors are minio's, unconverted, except
// an outage past the retries (ErrUnavailable).
func (s *S3) put(ctx context.Context, key, clean string, content []byte, opts minio.PutObjectOptions) (FileInfo, error) {
	var up minio.UploadInfo
	err := s.retry(ctx, func() (err error) {
		up, err = s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(content), int64(len(content)), opts)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	info := FileInfo{Path: clean, Size: int64(len(content)), ETag: up.ETag, ModTime: up.LastModified}
	if info.ModTime.IsZero() {
		// A PUT's answer carries no Last-Modified. The write's time is when
		// S3 acknowledged it, by this process's clock, as a build's staged
		// write reports its own; asking S3 would be a HEAD per write, for a
		// time Stat and List report anyway.
		info.ModTime = time.Now()
	}
	return info, nil
}

// WriteIf implements Store with a conditional PUT: If-Match with the
// expected ETag, or If-None-Match "*" to create only. The server checks the
// condition and writes under its own lock of the object, so two writers
// against the same version cannot both succeed.
func (s *S3) WriteIf(ctx context.Context, projectID, p string, content []byte, ifMatch string) (FileInfo, error) {
	key, clean, err := objectKey(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("write %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	if ifMatch == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(ifMatch)
	}
	info, err := s.put(ctx, key, clean, content, opts)
	if err != nil {
		if preconditionFailed(err) {
			err = conflict(clean, func() ([]byte, FileInfo, error) {
				content, oi, err := s.get(ctx, key)
				return content, fileInfo(clean, oi), err
			})
		}
		return FileInfo{}, fmt.Errorf("write %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	return info, nil
}

// preconditionFailed reports a conditional PUT refused: 412, or the
// NoSuchKey some servers answer an If-Match on a missing object with.
func preconditionFailed(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	return resp.StatusCode == http.StatusPreconditionFailed || resp.Code == minio.PreconditionFailed ||
		resp.Code == minio.NoSuchKey
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, projectID, p string) error {
	key, _, err := objectKey(ctx, projectID, p)
	if err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	// RemoveObject succeeds on a missing key.
	if _, err := s.stat(ctx, key, minio.StatObjectOptions{}); err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	if err := s.remove(ctx, key); err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, err)
	}
	return nil
}

// DeleteIf implements Store as closely as S3 allows: minio-go's DELETE
// carries no condition, and S3-compatible servers differ in honouring one
// on a DELETE, so the version is
// checked by a conditional HEAD (If-Match) right before an unconditional
// DELETE. A write landing between the two is deleted: the window is one
// round trip, not the whole operation.
func (s *S3) DeleteIf(ctx context.Context, projectID, p, ifMatch string) error {
	key, clean, err := objectKey(ctx, projectID, p)
	if err == nil && ifMatch == "" {
		err = errNoVersion
	}
	if err != nil {
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	opts := minio.StatObjectOptions{}
	if err := opts.SetMatchETag(ifMatch); err != nil {
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	if _, err := s.stat(ctx, key, opts); err != nil {
		if preconditionFailed(err) || errors.Is(err, ErrNotFound) && ifMatch != "" {
			err = conflict(clean, func() ([]byte, FileInfo, error) {
				content, oi, err := s.get(ctx, key)
				return content, fileInfo(clean, oi), err
			})
		}
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	if err := s.remove(ctx, key); err != nil {
		return fmt.Errorf("delete %q in project %q if at version %q: %w", p, projectID, ifMatch, err)
	}
	return nil
}

// stat is a HEAD of key, retried while the store is unreachable; a
// missing key is ErrNotFound.
func (s *S3) stat(ctx context.Context, key string, opts minio.StatObjectOptions) (oi minio.ObjectInfo, err error) {
	err = s.retry(ctx, func() (err error) {
		oi, err = s.client.StatObject(ctx, s.bucket, key, opts)
		return err
	})
	return oi, s3Error(err)
}

// remove deletes key, retried while the store is unreachable.
func (s *S3) remove(ctx context.Context, key string) error {
	return s3Error(s.retry(ctx, func() error {
		return s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	}))
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, projectID, p string) (FileInfo, error) {
	key, clean, err := objectKey(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, err)
	}
	oi, err := s.stat(ctx, key, minio.StatObjectOptions{})
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, err)
	}
	return fileInfo(clean, oi), nil
}

// List implements Store. Keys ending in "/" (folder markers made by other
// tools) are skipped.
func (s *S3) List(ctx context.Context, projectID, dir string) ([]FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	if err := checkProjectID(projectID); err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	clean, err := CleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, err)
	}
	projectPrefix := projectID + "/"
	prefix := projectPrefix
	if clean != "" {
		prefix += clean + "/"
	}
	var files []FileInfo
	err = s.retry(ctx, func() error {
		files = []FileInfo{}
		for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if oi.Err != nil {
				return oi.Err
			}
			if strings.HasSuffix(oi.Key, "/") {
				continue
			}
			files = append(files, fileInfo(strings.TrimPrefix(oi.Key, projectPrefix), oi))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, s3Error(err))
	}
	slices.SortFunc(files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// Move implements Store with a server-side copy and a delete of the source.
func (s *S3) Move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	if err := s.move(ctx, projectID, from, to, overwrite); err != nil {
		return fmt.Errorf("move %q to %q in project %q: %w", from, to, projectID, err)
	}
	return nil
}

func (s *S3) move(ctx context.Context, projectID, from, to string, overwrite bool) error {
	fromKey, _, err := objectKey(ctx, projectID, from)
	if err != nil {
		return err
	}
	toKey, _, err := objectKey(ctx, projectID, to)
	if err != nil {
		return err
	}
	if _, err := s.stat(ctx, fromKey, minio.StatObjectOptions{}); err != nil {
		return err
	}
	if fromKey == toKey {
		if overwrite {
			return nil
		}
		return ErrExists
	}
	if !overwrite {
		_, err := s.stat(ctx, toKey, minio.StatObjectOptions{})
		switch {
		case err == nil:
			return ErrExists
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("stat target: %w", err)
		}
	}
	err = s.retry(ctx, func() error {
		_, err := s.client.CopyObject(ctx,
			minio.CopyDestOptions{Bucket: s.bucket, Object: toKey},
			minio.CopySrcOptions{Bucket: s.bucket, Object: fromKey})
		return err
	})
	if err != nil {
		return fmt.Errorf("copy: %w", s3Error(err))
	}
	if err := s.remove(ctx, fromKey); err != nil {
		return fmt.Errorf("remove source: %w", err)
	}
	return nil
}

// objectKey checks the context and the inputs and returns the object key
// and the cleaned path.
func objectKey(ctx context.Context, projectID, p string) (key, clean string, err error) {
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	if err := checkProjectID(projectID); err != nil {
		return "", "", err
	}
	clean, err = CleanPath(p)
	if err != nil {
		return "", "", err
	}
	return projectID + "/" + clean, clean, nil
}

func fileInfo(p string, oi minio.ObjectInfo) FileInfo {
	return FileInfo{Path: p, Size: oi.Size, ETag: oi.ETag, ModTime: oi.LastModified}
}

// retry runs op until it succeeds, fails for a reason other than an
// unreachable store, or the store stayed unreachable for s.retryFor; the
// last is ErrUnavailable. The wait between tries doubles from 50 ms to a
// second, jittered so that replicas do not come back in step.
func (s *S3) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(s.retryFor)
	wait := 50 * time.Millisecond
	for {
		err := op()
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		pause := wait/2 + rand.N(wait/2+1)
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("%w for %s: %w", ErrUnavailable, s.retryFor, err)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		wait = min(2*wait, time.Second)
	}
}

// unreachable reports a failure of the store rather than of the request:
// no connection, a connection lost, a timeout, a 5xx answer, throttling.
func unreachable(err error) bool {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.Code {
		case "SlowDown", "SlowDownRead", "SlowDownWrite", "Throttling", "ThrottlingException",
			"RequestLimitExceeded", "RequestThrottled", "RequestTimeout", "InternalError", "ServiceUnavailable":
			return true
		}
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests ||
			resp.StatusCode == http.StatusRequestTimeout
	}
	var nerr net.Error
	var uerr *url.Error
	return errors.As(err, &nerr) || errors.As(err, &uerr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// s3Error turns a missing key into ErrNotFound and keeps every other error.
func s3Error(err error) error {
	if err == nil {
		return nil
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.Code == minio.NoSuchKey {
		return ErrNotFound
	}
	return err
}
