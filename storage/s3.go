package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
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
}

// String describes the config without the secret key.
func (c S3Config) String() string {
	return fmt.Sprintf("{Endpoint:%s AccessKey:%s SecretKey:%s Bucket:%s Region:%s UseSSL:%t}",
		c.Endpoint, c.AccessKey, redact(c.SecretKey), c.Bucket, c.Region, c.UseSSL)
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
type S3 struct {
	client    *minio.Client
	transport *http.Transport
	bucket    string
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
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.UseSSL,
		Region:    cfg.Region,
		Transport: transport,
	})
	if err != nil {
		return nil, fmt.Errorf("new s3 store at %s: %w", cfg.Endpoint, err)
	}
	s := &S3{client: client, transport: transport, bucket: cfg.Bucket}
	if err := s.ensureBucket(ctx, cfg.Region); err != nil {
		s.transport.CloseIdleConnections()
		return nil, fmt.Errorf("new s3 store at %s: %w", cfg.Endpoint, err)
	}
	return s, nil
}

func (s *S3) ensureBucket(ctx context.Context, region string) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("check bucket %q: %w", s.bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region}); err != nil {
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
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("read %q in project %q: %w", p, projectID, err)
	}
	return content, fileInfo(clean, oi), nil
}

// get fetches an object with a single GET, so that the content and the info
// describe the same version even while it is being overwritten.
func (s *S3) get(ctx context.Context, key string) ([]byte, minio.ObjectInfo, error) {
	body, oi, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, minio.ObjectInfo{}, s3Error(err)
	}
	defer body.Close()
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

// put uploads content to key. Errors are minio's, unconverted.
func (s *S3) put(ctx context.Context, key, clean string, content []byte, opts minio.PutObjectOptions) (FileInfo, error) {
	up, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(content), int64(len(content)), opts)
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
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, s3Error(err))
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %q in project %q: %w", p, projectID, s3Error(err))
	}
	return nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, projectID, p string) (FileInfo, error) {
	key, clean, err := objectKey(ctx, projectID, p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, err)
	}
	oi, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %q in project %q: %w", p, projectID, s3Error(err))
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
	files := []FileInfo{}
	for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return nil, fmt.Errorf("list %q in project %q: %w", dir, projectID, s3Error(oi.Err))
		}
		if strings.HasSuffix(oi.Key, "/") {
			continue
		}
		files = append(files, fileInfo(strings.TrimPrefix(oi.Key, projectPrefix), oi))
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
	if _, err := s.client.StatObject(ctx, s.bucket, fromKey, minio.StatObjectOptions{}); err != nil {
		return s3Error(err)
	}
	if fromKey == toKey {
		if overwrite {
			return nil
		}
		return ErrExists
	}
	if !overwrite {
		_, err := s.client.StatObject(ctx, s.bucket, toKey, minio.StatObjectOptions{})
		switch err := s3Error(err); {
		case err == nil:
			return ErrExists
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("stat target: %w", err)
		}
	}
	_, err = s.client.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: s.bucket, Object: toKey},
		minio.CopySrcOptions{Bucket: s.bucket, Object: fromKey})
	if err != nil {
		return fmt.Errorf("copy: %w", s3Error(err))
	}
	if err := s.client.RemoveObject(ctx, s.bucket, fromKey, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("remove source: %w", s3Error(err))
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
