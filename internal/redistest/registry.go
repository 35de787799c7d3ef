package redistest

import (
	"errors"
	"net"
	"sync"
)

// reservedPort is the well-known Redis port; a system Redis may listen
// there, so it is never chosen.
const reservedPort = 6379

// registry remembers the ports held by this process's servers (so a port
// freed by Kill is not handed to another server before Restart) and the
// owned servers not yet closed (for VerifyNoLeaks).
var registry = struct {
	sync.Mutex
	ports map[int]bool
	live  map[*Server]struct{}
}{ports: map[int]bool{}, live: map[*Server]struct{}{}}

// reservePort picks a free port on 127.0.0.1 by listening on port 0 and
// closing the listener. The port stays reserved until releasePort.
func reservePort() (int, error) {
	var lastErr error = errors.New("no usable port found")
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			lastErr = err
			continue
		}
		registry.Lock()
		taken := port == reservedPort || registry.ports[port]
		if !taken {
			registry.ports[port] = true
		}
		registry.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, lastErr
}

func releasePort(port int) {
	registry.Lock()
	delete(registry.ports, port)
	registry.Unlock()
}

func track(s *Server) {
	registry.Lock()
	registry.live[s] = struct{}{}
	registry.Unlock()
}

func untrack(s *Server) {
	registry.Lock()
	delete(registry.live, s)
	registry.Unlock()
}

// liveServers returns the owned servers that were started but not closed.
func liveServers() []*Server {
	registry.Lock()
	defer registry.Unlock()
	out := make([]*Server, 0, len(registry.live))
	for s := range registry.live {
		out = append(out, s)
	}
	return out
}
