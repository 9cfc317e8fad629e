package storage

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Service objects are the service's own objects, kept in the projects'
// bucket beside their files (the events archive, package archive). A
// service key's first segment is one no project id can be (it starts with
// an underscore, which checkProjectID refuses), so no project path names a
// service object, no project listing shows one, and the methods below
// cannot reach a project's file.

// CheckServiceKey returns an error wrapping ErrInvalidPath unless key is a
// clean object key outside every project's files: its first segment starts
// with "_", and it has no empty, "." or ".." segment, backslash, control
// character or invalid UTF-8.
func CheckServiceKey(key string) error {
	if err := checkServiceKey(key); err != nil {
		return fmt.Errorf("service key %s: %w", quote(key), err)
	}
	return nil
}

func checkServiceKey(key string) error {
	if len(key) > MaxPathBytes {
		return fmt.Errorf("longer than %d bytes: %w", MaxPathBytes, ErrInvalidPath)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	if !strings.HasPrefix(key, "_") {
		return fmt.Errorf("does not start with \"_\", so a project id could name it: %w", ErrInvalidPath)
	}
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		// A trailing slash is a prefix's, whose last segment is empty.
		if seg == "" && i == len(segs)-1 {
			continue
		}
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("segment %q: %w", seg, ErrInvalidPath)
		}
	}
	return nil
}

// PutService uploads size bytes of content as the service object key,
// replacing any object there. content is read again from its start when an
// unreachable store makes the upload retry.
func (s *S3) PutService(ctx context.Context, key string, content io.ReadSeeker, size int64) (FileInfo, error) {
	if err := CheckServiceKey(key); err != nil {
		return FileInfo{}, fmt.Errorf("put service object: %w", err)
	}
	var up minio.UploadInfo
	err := s.retry(ctx, func() (err error) {
		if _, err := content.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewind: %w", err)
		}
		up, err = s.client.PutObject(ctx, s.bucket, key, content, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
		return err
	})
	if err != nil {
		return FileInfo{}, fmt.Errorf("put service object %q: %w", key, s3Error(err))
	}
	return FileInfo{Path: key, Size: size, ETag: up.ETag, ModTime: up.LastModified}, nil
}

// OpenService opens the service object key for reading, streamed from the
// store: ErrNotFound when it does not exist. The caller closes it.
func (s *S3) OpenService(ctx context.Context, key string) (io.ReadCloser, FileInfo, error) {
	if err := CheckServiceKey(key); err != nil {
		return nil, FileInfo{}, fmt.Errorf("open service object: %w", err)
	}
	var (
		body io.ReadCloser
		oi   minio.ObjectInfo
	)
	err := s.retry(ctx, func() (err error) {
		body, oi, _, err = minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
		return err
	})
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("open service object %q: %w", key, s3Error(err))
	}
	return body, fileInfo(key, oi), nil
}

// RemoveService deletes the service object key; a missing one is no error.
func (s *S3) RemoveService(ctx context.Context, key string) error {
	if err := CheckServiceKey(key); err != nil {
		return fmt.Errorf("remove service object: %w", err)
	}
	if err := s.remove(ctx, key); err != nil {
		return fmt.Errorf("remove service object %q: %w", key, err)
	}
	return nil
}

// ListService returns the service objects under prefix, sorted by key
// (each FileInfo's Path is the whole key).
func (s *S3) ListService(ctx context.Context, prefix string) ([]FileInfo, error) {
	if err := CheckServiceKey(prefix); err != nil {
		return nil, fmt.Errorf("list service objects: %w", err)
	}
	var out []FileInfo
	err := s.retry(ctx, func() error {
		out = []FileInfo{}
		for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if oi.Err != nil {
				return oi.Err
			}
			out = append(out, fileInfo(oi.Key, oi))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list service objects under %q: %w", prefix, s3Error(err))
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}
