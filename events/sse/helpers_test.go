package sse_test

import (
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func jwtTime(t time.Time) *jwt.NumericDate { return jwt.NewNumericDate(t) }

func validClaims() jwt.RegisteredClaims {
	return jwt.RegisteredClaims{ExpiresAt: jwtTime(time.Now().Add(time.Hour))}
}

func expiredClaims() jwt.RegisteredClaims {
	return jwt.RegisteredClaims{ExpiresAt: jwtTime(time.Now().Add(-time.Minute))}
}
