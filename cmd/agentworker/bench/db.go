package bench

import (
	"fmt"
	"net/url"
	"strings"
)

// replaceDatabase returns connString pointing at database name.
func replaceDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse database url: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return connString + " dbname=" + name, nil
}
