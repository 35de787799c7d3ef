package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
)

// connFlags are the connection options every subcommand takes.
type connFlags struct {
	addr, user, password, prefix, master string
	tls, insecure, cluster               bool
	ca, cert, key                        string
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:6379", "Redis address(es), comma-separated (Sentinels with -sentinel-master)")
	fs.StringVar(&f.user, "user", "", "Redis ACL user name")
	fs.StringVar(&f.password, "password", "", "Redis password (default: $RELOCK_PASSWORD)")
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS")
	fs.StringVar(&f.ca, "tls-ca", "", "PEM file of the CA that signed the server certificate (implies -tls)")
	fs.StringVar(&f.cert, "tls-cert", "", "PEM client certificate file (implies -tls; with -tls-key)")
	fs.StringVar(&f.key, "tls-key", "", "PEM client key file")
	fs.BoolVar(&f.insecure, "tls-insecure", false, "do not verify the server certificate (implies -tls)")
	fs.BoolVar(&f.cluster, "cluster", false, "the addresses are Redis Cluster nodes")
	fs.StringVar(&f.master, "sentinel-master", "", "master set name: the addresses are Sentinels")
	fs.StringVar(&f.prefix, "prefix", "rlock", "key prefix of the locks (rlock.WithKeyPrefix)")
}

func (f *connFlags) options() (rueidis.ClientOption, error) {
	opt := rueidis.ClientOption{
		InitAddress:  splitAddrs(f.addr),
		Username:     f.user,
		Password:     f.password,
		DisableCache: true,
	}
	if opt.Password == "" {
		opt.Password = os.Getenv("RELOCK_PASSWORD")
	}
	if len(opt.InitAddress) == 0 {
		return opt, fmt.Errorf("-addr: no address given")
	}
	if f.master != "" {
		opt.Sentinel.MasterSet = f.master
	} else if !f.cluster {
		opt.ForceSingleClient = true
	}
	var err error
	opt.TLSConfig, err = f.tlsConfig()
	return opt, err
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func (f *connFlags) tlsConfig() (*tls.Config, error) {
	if !f.tls && f.ca == "" && f.cert == "" && !f.insecure {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: f.insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // asked for by -tls-insecure
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca: no PEM certificate in %s", f.ca)
		}
	}
	if f.cert != "" || f.key != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// connect returns a rueidis client and a lock Client on it; close closes both.
func (f *connFlags) connect() (c *rlock.Client, closeAll func(), err error) {
	opt, err := f.options()
	if err != nil {
		return nil, nil, err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", f.addr, err)
	}
	c, err = rlock.New(rc, rlock.WithKeyPrefix(f.prefix))
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); rc.Close() }, nil
}
