package console_test

import (
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func jwtDate(t time.Time) *jwt.NumericDate { return jwt.NewNumericDate(t) }
