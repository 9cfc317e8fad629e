package redact_test

import (
	"fmt"

	"github.com/agentworker/agentworker/redact"
)

func ExampleString() {
	fmt.Println(redact.String("dial postgres://app:hunter2@db:5432/app: Authorization: Bearer abcdef0123456789 rejected"))
	fmt.Println(redact.String("invalid key sk-proj-0123456789abcdef"))
	// Output:
	// dial postgres://app:[REDACTED]@db:5432/app: Authorization: [REDACTED] rejected
	// invalid key [REDACTED]
}
