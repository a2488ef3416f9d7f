// Package tcpproxy is a TCP proxy for tests: it forwards a local port to a
// server and can be cut and restored, to make a database or broker go away
// and come back on the same address without touching the shared service.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Proxy forwards connections on Addr to its target.
type Proxy struct {
	Addr string // where clients connect, 127.0.0.1 and a free port

	t      testing.TB
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

// Start listens on a free local port and forwards to target (host:port);
// the test's cleanup cuts it.
func Start(t testing.TB, target string) *Proxy {
	p := &Proxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.Cut)
	return p
}

func (p *Proxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.ln, p.Addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // cut meanwhile: this one goes too
				p.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// Cut closes the listener and every connection: the service is gone.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore listens again on the same address.
func (p *Proxy) Restore() { p.listen(p.Addr) }
