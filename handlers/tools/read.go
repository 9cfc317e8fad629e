package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentworker/agentworker/storage"
)

// Read limits: the model's context is the scarce resource.
const (
	maxReadBytes        = 40 << 10
	defaultSearchLimit  = 50
	maxSearchLimit      = 200
	maxSearchFileBytes  = 1 << 20
	defaultStructDepth  = 2
	maxStructDepth      = 5
	defaultStructMaxLen = 200
)

func storageFail(op, p string, err error) Result {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return Fail(fmt.Sprintf("%s: file not found: %s", op, p), "use list_files or get_project_structure to see which files exist")
	case errors.Is(err, storage.ErrInvalidPath):
		return Fail(fmt.Sprintf("%s: invalid path %q: paths are relative to the project root, without '..'", op, p), "")
	case errors.As(err, new(*storage.ConflictError)):
		var ce *storage.ConflictError
		errors.As(err, &ce)
		extra := map[string]any{"path": ce.Path, "exists": ce.Exists}
		if ce.Exists {
			extra["currentVersion"] = ce.ETag
			extra["currentContent"] = clip(string(ce.Current), maxReadBytes)
		}
		return FailWith(fmt.Sprintf("%s: %s changed since you read it (someone else wrote it meanwhile); your change was not made", op, ce.Path),
			"redo your change against currentContent", extra)
	case errors.Is(err, storage.ErrSensitive):
		return Fail(fmt.Sprintf("%s: refused: %s is a sensitive file (keys, credentials, .env); tools may not read or write it", op, p),
			"do not use secrets files; ask the user with request_input if you need a value")
	case errors.Is(err, storage.ErrOutOfScope):
		return Fail(fmt.Sprintf("%s: refused: %s is outside this task's allowed paths", op, p),
			"change only files within the task's allowed_paths")
	case errors.Is(err, storage.ErrTooLarge):
		return Fail(fmt.Sprintf("%s: refused: %v", op, err), "work with smaller files, or split the content")
	case errors.Is(err, storage.ErrExists):
		return Fail(fmt.Sprintf("%s: file already exists: %s", op, p), "")
	case errors.As(err, new(*ReservedPathError)):
		var re *ReservedPathError
		errors.As(err, &re)
		extra := map[string]any{"path": re.Path, "reserved": re.Reserved}
		if re.Path == re.Reserved {
			return FailWith(fmt.Sprintf("%s: refused: %s: %v", op, re.Path, ErrReservedPath), "leave this file to the service", extra)
		}
		return FailWith(fmt.Sprintf("%s: refused: %s is reserved: the service writes %s itself, and a file at %s would take its place", op, re.Path, re.Reserved, re.Path),
			"choose a path that is neither under nor a directory of "+re.Reserved, extra)
	default:
		return Fail(fmt.Sprintf("%s %s failed: %v", op, p, err), "")
	}
}

func listFilesTool() Tool {
	return Tool{
		Name:        "list_files",
		Description: "List the files and directories directly inside a directory of the project (not recursive).",
		Parameters:  schema(nil, map[string]any{"path": str("Directory relative to the project root; empty for the root.")}),
		Access:      ReadOnly,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Path string `json:"path"`
			}
			if r := decode("list_files", raw, &args); r != nil {
				return *r
			}
			dir, err := storage.CleanDir(args.Path)
			if err != nil {
				return storageFail("list_files", args.Path, err)
			}
			files, err := env.Store.List(ctx, env.ProjectID, dir)
			if err != nil {
				return storageFail("list_files", args.Path, err)
			}
			seen := map[string]bool{}
			var entries []map[string]any
			for _, f := range files {
				rel := strings.TrimPrefix(f.Path, dir)
				rel = strings.TrimPrefix(rel, "/")
				if first, _, isDir := strings.Cut(rel, "/"); isDir {
					if !seen[first] {
						seen[first] = true
						entries = append(entries, map[string]any{"name": first + "/", "type": "dir"})
					}
					continue
				}
				entries = append(entries, map[string]any{"name": rel, "type": "file", "size": f.Size})
			}
			return OK(fmt.Sprintf("%d entries in /%s", len(entries), dir), map[string]any{"path": dir, "entries": entries})
		},
	}
}

func readFileTool() Tool {
	return Tool{
		Name:        "read_file",
		Description: "Read a text file of the project, optionally only lines start_line..end_line (1-based, inclusive).",
		Parameters: schema([]string{"path"}, map[string]any{
			"path":       str("File path relative to the project root."),
			"start_line": intg("First line to return (1-based). Optional."),
			"end_line":   intg("Last line to return (inclusive). Optional."),
		}),
		Access: ReadOnly,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Path      string `json:"path"`
				StartLine int    `json:"start_line"`
				EndLine   int    `json:"end_line"`
			}
			if r := decode("read_file", raw, &args); r != nil {
				return *r
			}
			p, err := storage.CleanPath(args.Path)
			if err != nil {
				return storageFail("read_file", args.Path, err)
			}
			content, info, err := env.Store.Read(ctx, env.ProjectID, p)
			if err != nil {
				return storageFail("read_file", p, err)
			}
			if isBinary(content) {
				// Its bytes mean nothing to the model and cannot be stored
				// in the timeline: say what it is instead.
				kind := http.DetectContentType(content)
				return OK(fmt.Sprintf("%s is a binary file (%d bytes, %s); its bytes are not shown", p, len(content), kind),
					map[string]any{"path": p, "binary": true, "size": len(content), "contentType": kind, "version": info.ETag})
			}
			lines := strings.SplitAfter(string(content), "\n")
			if len(lines) > 0 && lines[len(lines)-1] == "" {
				lines = lines[:len(lines)-1]
			}
			total := len(lines)
			start, end := args.StartLine, args.EndLine
			if start <= 0 {
				start = 1
			}
			if end <= 0 || end > total {
				end = total
			}
			if total > 0 && start > total {
				return Fail(fmt.Sprintf("read_file: start_line %d is past the end of %s (%d lines)", start, p, total), "")
			}
			if start > end && total > 0 {
				return Fail(fmt.Sprintf("read_file: start_line %d is after end_line %d", start, end), "")
			}
			text := ""
			if total > 0 {
				text = strings.Join(lines[start-1:end], "")
			}
			body := map[string]any{"path": p, "content": text, "startLine": start, "endLine": end, "totalLines": total, "version": info.ETag}
			var full string
			if len(text) > maxReadBytes {
				head, tail, omitted := headTail(lines[start-1:end], maxReadBytes)
				full = mustJSON(body)
				body["content"] = head + fmt.Sprintf("\n… %d lines omitted …\n", omitted) + tail
				body["truncated"] = true
				body["note"] = fmt.Sprintf("output cut to its head and tail (%d bytes); %d lines in the middle were omitted: read a smaller line range to see them", maxReadBytes, omitted)
			}
			r := OK(fmt.Sprintf("read %s (lines %d-%d of %d)", p, start, end, total), body)
			r.Full = full
			return r
		},
	}
}

func searchFilesTool() Tool {
	return Tool{
		Name:        "search_files",
		Description: "Search the project's files recursively for a regular expression (or a literal string) and return matching lines with their line numbers.",
		Parameters: schema([]string{"query"}, map[string]any{
			"query":       str("Regular expression (RE2 syntax), or a literal string when literal is true."),
			"path":        str("Directory to search, relative to the project root; empty for the whole project."),
			"glob":        str("Only search files whose name matches this glob, e.g. *.ts."),
			"literal":     boolean("Treat query as a literal string."),
			"max_results": intg(fmt.Sprintf("Maximum matches to return (default %d, max %d).", defaultSearchLimit, maxSearchLimit)),
		}),
		Access: ReadOnly,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Query      string `json:"query"`
				Path       string `json:"path"`
				Glob       string `json:"glob"`
				Literal    bool   `json:"literal"`
				MaxResults int    `json:"max_results"`
			}
			if r := decode("search_files", raw, &args); r != nil {
				return *r
			}
			if args.Query == "" {
				return Fail("search_files: query is empty", "")
			}
			pattern := args.Query
			if args.Literal {
				pattern = regexp.QuoteMeta(pattern)
			}
			re, err := regexp.Compile(pattern)
			if err != nil {
				return Fail(fmt.Sprintf("search_files: invalid regular expression %q: %v", args.Query, err), "set literal to true to search for the text as is")
			}
			if args.Glob != "" {
				if err := checkGlob(args.Glob); err != nil {
					return Fail(fmt.Sprintf("search_files: invalid glob %q: %v", args.Glob, err), "")
				}
			}
			limit := args.MaxResults
			if limit <= 0 {
				limit = defaultSearchLimit
			}
			limit = min(limit, maxSearchLimit)
			dir, err := storage.CleanDir(args.Path)
			if err != nil {
				return storageFail("search_files", args.Path, err)
			}
			// A listing up to storage.ListCache's MaxAge old: what this task
			// wrote is in it, and an older one is said so below.
			files, listedAge, err := storage.ListRecent(ctx, env.Store, env.ProjectID, dir)
			if err != nil {
				return storageFail("search_files", args.Path, err)
			}
			var candidates []storage.FileInfo
			skipped := 0
			for _, f := range files {
				switch {
				case !selected(f.Path, globs(args.Glob), nil), f.Size > maxSearchFileBytes:
				case binaryExt[strings.ToLower(path.Ext(f.Path))]:
					skipped++
				default:
					candidates = append(candidates, f)
				}
			}
			found, err := searchAll(ctx, env, candidates, re, limit)
			if err != nil {
				return storageFail("search_files", found.failed, err)
			}
			body := map[string]any{"matches": found.matches, "count": len(found.matches)}
			if found.more {
				body["note"] = fmt.Sprintf("more results: only the first %d matches are shown; narrow the query, path or glob", limit)
			}
			if skipped += found.binary; skipped > 0 {
				body["skippedBinary"] = skipped
			}
			if listedAge >= time.Second {
				body["filesListedSecondsAgo"] = int(listedAge.Seconds())
			}
			return OK(fmt.Sprintf("%d matches for %q", len(found.matches), args.Query), body)
		},
	}
}

// searchParallelism is how many files search_files reads at once: an
// object store answers each read in milliseconds, so reading one by one is
// slow (1.6 s for 2,000 files in MinIO; 0.55 s with 64 at once).
const searchParallelism = 64

// isBinary reports content that is not text: a NUL byte, or bytes that are
// not UTF-8, in its first 8 KiB.
func isBinary(content []byte) bool {
	head := content[:min(len(content), 8<<10)]
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	// A multi-byte character cut by the 8 KiB boundary is still text.
	for i := 0; i < 3 && len(head) > 0 && !utf8.Valid(head) && len(head) == 8<<10; i++ {
		head = head[:len(head)-1]
	}
	return !utf8.Valid(head)
}

// binaryExt are extensions search_files skips without reading.
var binaryExt = map[string]bool{
	".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true, ".ico": true, ".bmp": true, ".avif": true,
	".pdf": true, ".zip": true, ".gz": true, ".tgz": true, ".tar": true, ".7z": true, ".rar": true,
	".woff": true, ".woff2": true, ".ttf": true, ".otf": true, ".eot": true,
	".mp3": true, ".mp4": true, ".wav": true, ".ogg": true, ".webm": true, ".mov": true,
	".wasm": true, ".exe": true, ".dll": true, ".so": true, ".dylib": true, ".class": true, ".jar": true,
}

type searchResult struct {
	matches []map[string]any
	more    bool
	binary  int    // files skipped for holding a NUL byte
	failed  string // the file whose read failed
}

// searchAll reads paths searchParallelism at a time and returns the first
// limit matching lines in the order of paths, as a sequential search would.
// It stops reading once limit matches are certain.
func searchAll(ctx context.Context, env Env, files []storage.FileInfo, re *regexp.Regexp, limit int) (searchResult, error) {
	type slot struct {
		done    chan struct{}
		matches []map[string]any
		binary  bool
		err     error
	}
	slots := make([]slot, len(files))
	for i := range slots {
		slots[i].done = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var next atomic.Int64
	for range min(searchParallelism, len(files)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				s := &slots[i]
				if s.err = ctx.Err(); s.err == nil {
					s.matches, s.binary, s.err = searchFile(ctx, env, files[i], re, limit+1)
				}
				close(s.done)
			}
		})
	}
	var res searchResult
	for i := range slots {
		s := &slots[i]
		select {
		case <-s.done:
		case <-ctx.Done():
			return res, ctx.Err()
		}
		switch {
		case errors.Is(s.err, storage.ErrNotFound):
			continue // deleted since the listing
		case s.err != nil:
			res.failed = files[i].Path
			return res, s.err
		case s.binary:
			res.binary++
			continue
		}
		for _, m := range s.matches {
			if len(res.matches) == limit {
				res.more = true
				return res, nil
			}
			res.matches = append(res.matches, m)
		}
	}
	return res, nil
}

// searchFile returns up to most matching lines of one file, or binary when
// its first 8 KiB hold a NUL byte.
func searchFile(ctx context.Context, env Env, f storage.FileInfo, re *regexp.Regexp, most int) ([]map[string]any, bool, error) {
	p := f.Path
	key := env.ProjectID + "/" + p
	content, ok := env.Cache.get(key, f.ETag)
	if !ok {
		var info storage.FileInfo
		var err error
		if content, info, err = env.Store.Read(ctx, env.ProjectID, p); err != nil {
			return nil, false, err
		}
		env.Cache.put(key, info.ETag, content)
	}
	if bytes.IndexByte(content[:min(len(content), 8<<10)], 0) >= 0 {
		return nil, true, nil
	}
	// A line's every match starts with the regexp's literal prefix, and
	// every line is in the content: a file without the prefix has no match.
	if prefix, _ := re.LiteralPrefix(); prefix != "" && !bytes.Contains(content, []byte(prefix)) {
		return nil, false, nil
	}
	var matches []map[string]any
	for n, rest := 1, content; ; n++ {
		line, after, more := bytes.Cut(rest, []byte("\n"))
		if re.Match(line) {
			matches = append(matches, map[string]any{"path": p, "line": n, "text": clip(string(line), 300)})
			if len(matches) == most {
				break
			}
		}
		if !more {
			break
		}
		rest = after
	}
	return matches, false, nil
}

// defaultExcluded are directories a tree summary and a search skip unless
// an include pattern names them.
var defaultExcluded = []string{"node_modules", ".git", "dist", "build"}

func projectStructureTool() Tool {
	return Tool{
		Name: "get_project_structure",
		Description: "Show the project's directory tree recursively, up to a depth, with file counts per directory. " +
			"node_modules, .git, dist and build are excluded unless include_patterns names them.",
		Parameters: schema(nil, map[string]any{
			"depth":            intg(fmt.Sprintf("Directory depth to show (default %d, max %d).", defaultStructDepth, maxStructDepth)),
			"include_patterns": strs("Only show files matching one of these globs, e.g. src/**/*.ts or *.css."),
			"exclude_patterns": strs("Skip files and directories matching these globs."),
			"max_files":        intg(fmt.Sprintf("Maximum entries to show (default %d).", defaultStructMaxLen)),
		}),
		Access: ReadOnly,
		Run: func(ctx context.Context, env Env, raw json.RawMessage) Result {
			var args struct {
				Depth    int      `json:"depth"`
				Include  []string `json:"include_patterns"`
				Exclude  []string `json:"exclude_patterns"`
				MaxFiles int      `json:"max_files"`
			}
			if r := decode("get_project_structure", raw, &args); r != nil {
				return *r
			}
			for _, g := range append(append([]string{}, args.Include...), args.Exclude...) {
				if err := checkGlob(g); err != nil {
					return Fail(fmt.Sprintf("get_project_structure: invalid glob %q: %v", g, err), "")
				}
			}
			depth := args.Depth
			if depth <= 0 {
				depth = defaultStructDepth
			}
			depth = min(depth, maxStructDepth)
			maxFiles := args.MaxFiles
			if maxFiles <= 0 {
				maxFiles = defaultStructMaxLen
			}
			files, err := env.Store.List(ctx, env.ProjectID, "")
			if err != nil {
				return storageFail("get_project_structure", "", err)
			}
			counts := map[string]int{} // entry → files below it
			total := 0
			for _, f := range files {
				if !selected(f.Path, args.Include, args.Exclude) {
					continue
				}
				total++
				parts := strings.Split(f.Path, "/")
				for i := range parts {
					if i >= depth {
						break
					}
					name := strings.Join(parts[:i+1], "/")
					if i < len(parts)-1 {
						name += "/"
					}
					counts[name]++
				}
			}
			names := make([]string, 0, len(counts))
			for n := range counts {
				names = append(names, n)
			}
			sort.Strings(names)
			truncated := len(names) > maxFiles
			if truncated {
				names = names[:maxFiles]
			}
			var tree strings.Builder
			for _, n := range names {
				level := strings.Count(strings.TrimSuffix(n, "/"), "/")
				base := path.Base(strings.TrimSuffix(n, "/"))
				if strings.HasSuffix(n, "/") {
					fmt.Fprintf(&tree, "%s%s/ (%d files)\n", strings.Repeat("  ", level), base, counts[n])
				} else {
					fmt.Fprintf(&tree, "%s%s\n", strings.Repeat("  ", level), base)
				}
			}
			body := map[string]any{"tree": tree.String(), "totalFiles": total, "depth": depth, "truncated": truncated}
			if truncated {
				body["note"] = fmt.Sprintf("only the first %d entries are shown; narrow with include_patterns or a smaller depth", maxFiles)
			}
			return OK(fmt.Sprintf("%d files, %d entries shown", total, len(names)), body)
		},
	}
}

// selected applies include and exclude globs and the default exclusions.
func selected(p string, include, exclude []string) bool {
	for _, g := range exclude {
		if globMatch(g, p) {
			return false
		}
	}
	if len(include) > 0 {
		for _, g := range include {
			if globMatch(g, p) {
				return true
			}
		}
		return false
	}
	parts := strings.Split(p, "/")
	for _, dir := range parts[:len(parts)-1] {
		for _, x := range defaultExcluded {
			if dir == x {
				return false
			}
		}
	}
	return true
}

func checkGlob(g string) error {
	for _, seg := range strings.Split(g, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return err
		}
	}
	return nil
}

// globMatch matches a slash-separated path against a glob where "**"
// matches any number of directories. A pattern without a slash matches the
// file's name or any directory on its path (so "node_modules" and "*.ts"
// work as expected).
func globMatch(pattern, p string) bool {
	pattern = strings.TrimPrefix(strings.TrimSuffix(pattern, "/"), "./")
	parts := strings.Split(p, "/")
	if !strings.Contains(pattern, "/") {
		for _, part := range parts {
			if ok, _ := path.Match(pattern, part); ok {
				return true
			}
		}
		return false
	}
	return matchSegments(strings.Split(pattern, "/"), parts)
}

func matchSegments(pat, parts []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(parts); i++ {
				if matchSegments(pat[1:], parts[i:]) {
					return true
				}
			}
			return false
		}
		if len(parts) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], parts[0]); !ok {
			return false
		}
		pat, parts = pat[1:], parts[1:]
	}
	// A pattern naming a directory matches everything below it.
	return true
}

// headTail cuts lines to about limit bytes: the first and last lines, and
// the number of lines omitted between them.
func headTail(lines []string, limit int) (head, tail string, omitted int) {
	var h, t []string
	size := 0
	i, j := 0, len(lines)-1
	for i <= j {
		if size+len(lines[i]) > limit*2/3 {
			break
		}
		size += len(lines[i])
		h = append(h, lines[i])
		i++
	}
	for j >= i {
		if size+len(lines[j]) > limit {
			break
		}
		size += len(lines[j])
		t = append([]string{lines[j]}, t...)
		j--
	}
	return strings.Join(h, ""), strings.Join(t, ""), j - i + 1
}

func mustJSON(body map[string]any) string {
	b, _ := json.Marshal(body)
	return string(b)
}

func globs(g string) []string {
	if g == "" {
		return nil
	}
	return []string{g}
}
