package main

import "github.com/relockio/relock/rlock"

// The names of the kinds' APIs that the contenders need beyond the Mutex.

func fifoOption() rlock.Option { return rlock.WithFIFO() }

func quorumClose(q *rlock.Quorum) { q.Close() }
