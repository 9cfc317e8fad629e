package storage_test

import (
	"context"
	"fmt"
	"os"

	"github.com/agentworker/agentworker/storage"
)

func ExampleCleanPath() {
	for _, p := range []string{"./src/main.go", "docs/../README.md", "../etc/passwd"} {
		clean, err := storage.CleanPath(p)
		fmt.Printf("%q %v\n", clean, err)
	}
	// Output:
	// "src/main.go" <nil>
	// "README.md" <nil>
	// "" clean path "../etc/passwd": escapes the project: invalid path
}

func ExampleLocal() {
	root, err := os.MkdirTemp("", "storage-example-*")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)

	ctx := context.Background()
	var store storage.Store
	store, err = storage.NewLocal(root)
	if err != nil {
		panic(err)
	}
	const project = "0190c6a4-7d3e-7b7a-9c1e-6f4f3b2a1d00"
	if _, err := store.Write(ctx, project, "src/main.go", []byte("package main\n")); err != nil {
		panic(err)
	}
	if err := store.Move(ctx, project, "src/main.go", "cmd/app/main.go", false); err != nil {
		panic(err)
	}
	files, err := store.List(ctx, project, "")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		fmt.Println(f.Path, f.Size)
	}
	_, _, err = store.Read(ctx, project, "src/main.go")
	fmt.Println(err)
	// Output:
	// cmd/app/main.go 13
	// read "src/main.go" in project "0190c6a4-7d3e-7b7a-9c1e-6f4f3b2a1d00": file not found
}
