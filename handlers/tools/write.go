package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"

	"github.com/agentworker/agentworker/events"
	"github.com/agentworker/agentworker/storage"
)

const maxWriteBytes = 5 << 20

func writeFileTool() Tool {
	return Tool{
		Name:        "write_file",
		Description: "Create a file or replace its whole content.",
		Parameters: schema([]string{"path", "content"}, map[string]any{
			"path":    str("File path relative to the project root."),
			"content": str("The complete new content of the file."),
		}),
		Access: Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Path    *string `json:"path"`
				Content *string `json:"content"`
			}
			if r := decode("write_file", raw, &args); r != nil {
				return *r
			}
			if args.Path == nil || args.Content == nil {
				return Fail("write_file: path and content are required", "")
			}
			p, err := storage.CleanPath(*args.Path)
			if err != nil {
				return storageFail("write_file", *args.Path, err)
			}
			if len(*args.Content) > maxWriteBytes {
				return Fail(fmt.Sprintf("write_file: content of %s is %d bytes, over the %d byte limit", p, len(*args.Content), maxWriteBytes), "")
			}
			info, created, err := storage.Upsert(ctx, env.Store, env.ProjectID, p, []byte(*args.Content))
			if err != nil {
				return storageFail("write_file", p, err)
			}
			op := events.OpUpdate
			if created {
				op = events.OpCreate
			}
			summary := fmt.Sprintf("%sd %s (%d bytes)", op, p, info.Size)
			r := OK(summary, map[string]any{"path": p, "bytes": info.Size, "op": op})
			r.Changes = []events.FileUpdate{{Path: p, Op: op, Summary: summary, FileSize: info.Size, MimeType: mime.TypeByExtension(path.Ext(p))}}
			return r
		},
	}
}

func deleteFileTool() Tool {
	return Tool{
		Name:        "delete_file",
		Description: "Delete a file of the project.",
		Parameters:  schema([]string{"path"}, map[string]any{"path": str("File path relative to the project root.")}),
		Access:      Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Path string `json:"path"`
			}
			if r := decode("delete_file", raw, &args); r != nil {
				return *r
			}
			p, err := storage.CleanPath(args.Path)
			if err != nil {
				return storageFail("delete_file", args.Path, err)
			}
			if err := env.Store.Delete(ctx, env.ProjectID, p); err != nil {
				return storageFail("delete_file", p, err)
			}
			summary := "deleted " + p
			r := OK(summary, map[string]any{"path": p})
			r.Changes = []events.FileUpdate{{Path: p, Op: events.OpDelete, Summary: summary}}
			return r
		},
	}
}

// moveFileTool has exactly four outcomes: moved, source missing, target
// exists (without overwrite), and failed.
func moveFileTool() Tool {
	return Tool{
		Name:        "move_file",
		Description: "Move or rename a file from one path to another.",
		Parameters: schema([]string{"fromPath", "toPath"}, map[string]any{
			"fromPath":  str("Source file path, relative to the project root."),
			"toPath":    str("Target file path, relative to the project root."),
			"overwrite": boolean("Replace the target if it already exists (default false)."),
		}),
		Access: Write,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				FromPath  string `json:"fromPath"`
				ToPath    string `json:"toPath"`
				Overwrite bool   `json:"overwrite"`
			}
			if r := decode("move_file", raw, &args); r != nil {
				return *r
			}
			from, err := storage.CleanPath(args.FromPath)
			if err != nil {
				return storageFail("move_file", args.FromPath, err)
			}
			to, err := storage.CleanPath(args.ToPath)
			if err != nil {
				return storageFail("move_file", args.ToPath, err)
			}
			var r Result
			switch err := env.Store.Move(ctx, env.ProjectID, from, to, args.Overwrite); {
			case errors.Is(err, storage.ErrNotFound):
				r = Fail("source file does not exist: "+from, "")
			case errors.Is(err, storage.ErrExists):
				r = Fail("target file already exists: "+to, "set overwrite to true to replace it")
			case errors.Is(err, storage.ErrSensitive), errors.Is(err, storage.ErrOutOfScope), errors.Is(err, storage.ErrTooLarge),
				errors.Is(err, ErrReservedPath):
				r = storageFail("move_file", from+" → "+to, err)
			case err != nil:
				r = Fail(fmt.Sprintf("move file failed: %v", err), "")
			default:
				summary := fmt.Sprintf("file moved: %s → %s", from, to)
				r = OK(summary, map[string]any{"message": summary, "fromPath": from, "toPath": to})
				r.Changes = []events.FileUpdate{{Path: to, Op: events.OpMove, FromPath: from, ToPath: to, Summary: summary}}
			}
			r.FromPath, r.ToPath = from, to
			return r
		},
	}
}
