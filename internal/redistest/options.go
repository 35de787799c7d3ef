package redistest

import "time"

// Default settings; each can be changed with an [Option].
const (
	// DefaultImage is the container image used when no redis-server binary
	// is available.
	DefaultImage = "redis:7"
	// DefaultStartTimeout bounds how long a start or restart waits for the
	// server to answer PING.
	DefaultStartTimeout = 15 * time.Second
)

// Option configures how a server is started.
type Option func(*config)

type config struct {
	args         []string
	binary       string
	image        string
	startTimeout time.Duration
	// sentinelConf, when set, runs the server as a Sentinel (--sentinel)
	// with this configuration, written to a file in its directory
	// (Sentinel rewrites it).
	sentinelConf string
}

func newConfig(opts []Option) config {
	c := config{
		binary:       "redis-server",
		image:        DefaultImage,
		startTimeout: DefaultStartTimeout,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithArgs appends extra command-line arguments for redis-server, for example
// WithArgs("--maxmemory", "10mb"). They come after the defaults, so they can
// override them (WithArgs("--save", "60 1") re-enables snapshots), except
// --port, --bind, --dir, --logfile and --daemonize, which are refused.
// Options are ignored for servers taken from REDIS_ADDR.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithBinary sets the redis-server executable (a name looked up in PATH, or
// a path). The default is "redis-server".
func WithBinary(path string) Option {
	return func(c *config) { c.binary = path }
}

// WithImage sets the container image used by the Docker fallback. The
// default is [DefaultImage].
func WithImage(image string) Option {
	return func(c *config) { c.image = image }
}

// WithStartTimeout bounds how long a start or restart waits for PING. The
// default is [DefaultStartTimeout]. A deadline on the context passed to
// [StartServer] or [Server.Restart] applies as well.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.startTimeout = d
		}
	}
}
