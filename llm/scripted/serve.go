package scripted

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Loopback is a long-running scripted server on a loopback port (the demo
// model, the benchmarks). It keeps no requests.
type Loopback struct {
	// URL is the API's base URL, ending in /v1.
	URL string
	srv *http.Server
	// served yields Serve's error once it returns.
	served chan error
}

// ListenLoopback serves responder on a free 127.0.0.1 port until Close.
func ListenLoopback(responder Responder) (*Loopback, error) {
	return ListenLoopbackLimited(responder, nil)
}

// ListenLoopbackLimited is ListenLoopback refusing requests past limit
// (none when nil).
func ListenLoopbackLimited(responder Responder, limit *RateLimit) (*Loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the scripted model: %w", err)
	}
	l := &Loopback{
		URL:    "http://" + ln.Addr().String() + "/v1",
		srv:    &http.Server{Handler: &Server{Responder: responder, DiscardRequests: true, Limit: limit}, ReadHeaderTimeout: 5 * time.Second},
		served: make(chan error, 1),
	}
	go func() { l.served <- l.srv.Serve(ln) }()
	return l, nil
}

// Close stops the server and returns what ended it, if not Close itself.
func (l *Loopback) Close() error {
	cerr := l.srv.Close()
	if err := <-l.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("scripted model server: %w", err)
	}
	return cerr
}
