package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
)

// ManifestError refuses a package.json or lockfile that npm could read
// otherwise than the install's checks: not valid JSON, a key twice in an
// object (JSON.parse keeps the last, other readers the first), or a field
// npm reads of another type than it expects. The checks read keys in their
// exact case, as npm does; encoding/json's struct fields would also take
// "DevDependencies" for "devDependencies".
type ManifestError struct {
	File   string // package.json or the lockfile
	Path   string // where in it, as a jq path ("." for the whole)
	Reason string // what is wrong there
}

func (e *ManifestError) Error() string {
	where := e.Path
	if where == "." {
		where = "it"
	}
	return fmt.Sprintf("%s could be read otherwise than npm reads it (%s %s), so nothing is installed: write plain JSON, "+
		"each key once and in npm's case, dependencies as objects of version strings", e.File, where, e.Reason)
}

// maxManifestDepth bounds the nesting of a manifest (overrides and version
// 1 lockfiles nest; nothing npm writes comes near).
const maxManifestDepth = 256

// parseManifest reads a JSON document token by token into maps, slices,
// strings, json.Numbers, bools and nils, refusing a key twice in an object,
// text after the document and nesting past maxManifestDepth. A leading
// byte order mark is skipped, as npm skips it.
func parseManifest(file string, data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, []byte("\ufeff"))))
	dec.UseNumber()
	v, err := readJSON(dec, file, ".", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &ManifestError{File: file, Path: ".", Reason: "has text after the JSON document"}
	}
	return v, nil
}

func readJSON(dec *json.Decoder, file, path string, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid(file, path, err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxManifestDepth {
		return nil, &ManifestError{File: file, Path: path, Reason: fmt.Sprintf("nests deeper than %d levels", maxManifestDepth)}
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, invalid(file, path, err)
			}
			key := tok.(string) // the decoder reads only a string as a key
			if _, dup := obj[key]; dup {
				return nil, &ManifestError{File: file, Path: path, Reason: fmt.Sprintf("has the key %q twice", key)}
			}
			if obj[key], err = readJSON(dec, file, member(path, key), depth+1); err != nil {
				return nil, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, invalid(file, path, err)
		}
		return obj, nil
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := readJSON(dec, file, path+"["+strconv.Itoa(len(arr))+"]", depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, invalid(file, path, err)
		}
		return arr, nil
	}
	// The decoder returns a closing delimiter only where one is due.
	return nil, &ManifestError{File: file, Path: path, Reason: fmt.Sprintf("is not valid JSON: unexpected %q", delim)}
}

// invalid refuses a document that is not JSON, saying where.
func invalid(file, path string, err error) error {
	reason := "is not valid JSON: " + err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		reason += fmt.Sprintf(" (at byte %d)", se.Offset)
	}
	return &ManifestError{File: file, Path: path, Reason: reason}
}

// identifier is a key a jq path names without quotes.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// member is the jq path of key in the object at path.
func member(path, key string) string {
	if path == "." {
		path = ""
	}
	if identifier.MatchString(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// kindOf names the JSON type of a parsed value.
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "true or false"
	}
	return "null"
}

// wrongType refuses the value at path, which must be want.
func wrongType(file, path, want string, v any) error {
	return &ManifestError{File: file, Path: path, Reason: fmt.Sprintf("must be %s, not %s", want, kindOf(v))}
}

// field returns the member key of obj (path) if present, checking that it
// is of the type T (named want); present reports whether it was there.
func field[T any](file, path string, obj map[string]any, key, want string) (v T, present bool, err error) {
	raw, present := obj[key]
	if !present {
		return v, false, nil
	}
	v, ok := raw.(T)
	if !ok {
		return v, true, wrongType(file, member(path, key), want, raw)
	}
	return v, true, nil
}

// specsField returns the dependency list key of obj (path): an object of
// anything, each value checked as a spec by checkSpecs.
func specsField(file, path string, obj map[string]any, key string) (map[string]any, error) {
	deps, _, err := field[map[string]any](file, path, obj, key, "an object of version strings")
	return deps, err
}
