package auth_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/agentworker/agentworker/auth"
)

// A token whose projects claim lists one project may read that project's
// streams and nothing else; service_role may read all.
func ExampleVerifier_Authorize() {
	v, _ := auth.NewVerifier("an-hs256-secret-of-16+-bytes", nil)
	token, _ := v.Sign(auth.Claims{
		Projects:         []string{"7b0c2d1e-0000-4000-8000-000000000001"},
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
	})
	r := httptest.NewRequest("GET", "/v1/projects/x/tasks", nil)
	r.Header.Set("Authorization", "Bearer "+token)

	_, err := v.Authorize(r, "7b0c2d1e-0000-4000-8000-000000000001")
	fmt.Println("own project:", err)
	_, err = v.Authorize(r, "7b0c2d1e-0000-4000-8000-000000000002")
	fmt.Println("other project:", err != nil)
	// Output:
	// own project: <nil>
	// other project: true
}
