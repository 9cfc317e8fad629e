package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheckTimeout bounds one healthcheck: a server that answers later
// than this is not healthy.
const healthcheckTimeout = 5 * time.Second

// healthcheck asks the serve process of this host (this container) whether
// it is up: GET /healthz on HTTP_ADDR, through loopback when HTTP_ADDR
// listens on every interface. It fails unless the answer is 200. The image
// has no curl; a container healthcheck runs this.
func healthcheck(ctx context.Context, cfg config, out io.Writer) error {
	url, err := healthzURL(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	// The container's own server: never through a proxy from the environment.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
	}
	fmt.Fprintf(out, "healthy: %s\n", url)
	return nil
}

// healthzURL is the URL of /healthz of a server listening on addr
// (HTTP_ADDR): an empty or unspecified host is reached through loopback.
func healthzURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("healthcheck: HTTP_ADDR %q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
