package storage_test

import (
	"fmt"

	"github.com/agentworker/agentworker/storage"
)

func ExampleCheckSensitive() {
	fmt.Println(storage.CheckSensitive("config/.env.production"))
	fmt.Println(storage.CheckSensitive("src/main.go"))
	// Output:
	// config/.env.production: .env* files hold secrets: sensitive file
	// <nil>
}

func ExampleScope() {
	scope, _ := storage.NewScope([]string{"src/components/**", "docs/*.md"})
	fmt.Println(scope.Check("src/components/Login.vue"))
	fmt.Println(scope.Check("src/main.go"))
	// Output:
	// <nil>
	// src/main.go: path outside the task's allowed paths
}
