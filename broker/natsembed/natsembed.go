// Package natsembed runs a NATS server with JetStream inside the process, so
// that an example or a test can use nats:// end to end with no broker
// installed.
package natsembed

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 10 * time.Second

// Server is a running in-process NATS server.
type Server struct {
	ns      *server.Server
	tempDir string // removed by Shutdown; empty when the caller chose the directory
}

// Start starts a NATS server with JetStream listening on 127.0.0.1 at a free
// port, storing its streams in storeDir, or in a new temporary directory
// (removed by Shutdown) when storeDir is empty.
func Start(storeDir string) (*Server, error) {
	s := &Server{}
	if storeDir == "" {
		dir, err := os.MkdirTemp("", "natsembed-")
		if err != nil {
			return nil, fmt.Errorf("natsembed: creating store directory: %w", err)
		}
		storeDir, s.tempDir = dir, dir
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "entoutbox-natsembed",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true, // signals belong to the host program
	})
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	s.ns = ns
	ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("natsembed: server not ready after %s", readyTimeout)
	}
	if !ns.JetStreamEnabled() {
		s.Shutdown()
		return nil, errors.New("natsembed: JetStream did not start (is the store directory writable?)")
	}
	return s, nil
}

// URL is the server's client URL, nats://127.0.0.1:<port>.
func (s *Server) URL() string { return s.ns.ClientURL() }

// Shutdown stops the server and waits until it has stopped; it then removes
// the temporary store directory Start made, if any.
func (s *Server) Shutdown() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	s.removeTemp()
}

func (s *Server) removeTemp() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
	}
}
