package console

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// loginWindow is the window a client address's failed token attempts are
// counted in.
const loginWindow = time.Minute

// defaultLoginAttempts is how many failed attempts an address may make in
// a window when Config.LoginAttempts is zero.
const defaultLoginAttempts = 10

// loginLimit counts the failed token attempts of each client address in
// fixed windows: past max in one window, the address is refused until the
// window ends. It keeps a guess at the token to max a minute per address,
// and the window to one map entry per address that failed lately.
type loginLimit struct {
	max    int // no limit when not positive
	window time.Duration
	now    func() time.Time

	mu sync.Mutex
	by map[string]*failures
}

type failures struct {
	start time.Time
	n     int
}

func newLoginLimit(max int) *loginLimit {
	return &loginLimit{max: max, window: loginWindow, now: time.Now, by: map[string]*failures{}}
}

// wait is how long addr must wait before it may try again; 0 when it may.
func (l *loginLimit) wait(addr string) time.Duration {
	if l.max <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.by[addr]
	if !ok || f.n < l.max {
		return 0
	}
	left := f.start.Add(l.window).Sub(l.now())
	if left <= 0 {
		delete(l.by, addr)
		return 0
	}
	return left
}

// failed counts a failed attempt of addr.
func (l *loginLimit) failed(addr string) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f, ok := l.by[addr]
	if !ok || now.Sub(f.start) >= l.window {
		if len(l.by) >= 10_000 {
			l.sweep(now)
		}
		f = &failures{start: now}
		l.by[addr] = f
	}
	f.n++
}

// sweep drops the windows that ended.
func (l *loginLimit) sweep(now time.Time) {
	for addr, f := range l.by {
		if now.Sub(f.start) >= l.window {
			delete(l.by, addr)
		}
	}
}

// clientAddr is the address r came from: its IP, or the /64 network of
// an IPv6 one (a single host often has all of it). Behind a proxy that is
// the proxy's.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// tooManyAttempts refuses a request of an address past its attempts.
func tooManyAttempts(w http.ResponseWriter, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, "console: too many failed token attempts from this address; try again in "+strconv.Itoa(secs)+" s",
		http.StatusTooManyRequests)
}
