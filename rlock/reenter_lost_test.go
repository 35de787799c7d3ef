package rlock_test

import (
	"testing"
)

// A re-entry whose first attempt ran in Redis with its reply lost, and whose
// retry Redis then refused (over maxmemory: OOM, an answer, not a
// connection error), may have counted a level: the hold is given up, so
// that the one Unlock its caller owes ends it. (The level stayed in Redis,
// and the hold outlived that Unlock, renewed by the watchdog.)
func TestReentryLostThenRefusedGivesTheHoldUp(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		write bool
	}{{"Mutex", true}, {"RWMutex write", true}, {"RWMutex read", false}} {
		t.Run(tc.kind, func(t *testing.T) {
			e := ftNewEnv(t)
			fc := ftFaulty(t, e.srv)
			c := e.clientOn(fc)
			const name = "reenter-lost-refused"
			lock, unlock := c.Mutex(name).Lock, c.Mutex(name).Unlock
			if rw := c.RWMutex(name); tc.kind != "Mutex" {
				lock, unlock = rw.Lock, rw.Unlock
				if !tc.write {
					lock, unlock = rw.RLock, rw.RUnlock
				}
			}
			held, err := lock(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			maxmemory := func(v string) {
				if err := e.raw.Do(e.ctx, e.raw.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", v).Build()).Error(); err != nil {
					t.Error(err)
				}
			}
			// The re-entry runs, its reply is lost, and Redis refuses
			// writes before the retry.
			fc.set(once("reenter", ftFault{run: true, lose: true, hold: true}))
			go func() {
				done := <-fc.held
				maxmemory("1")
				close(done)
			}()
			if _, err := lock(held); err == nil {
				t.Fatal("the re-entry succeeded although Redis refused its retry")
			}
			maxmemory("0")
			_ = unlock(held) // the one Unlock the caller owes
			if held.Err() == nil {
				t.Fatal("the hold outlived the one Unlock its caller owed: a level the lost re-entry counted stayed")
			}
			other := e.client().Mutex(name)
			if tc.kind != "Mutex" {
				e.eventually(ftPatience, "the lock free in Redis", func() bool {
					info, err := e.client().RWMutex(name).Inspect(e.ctx)
					return err == nil && info.Writer == nil && info.NumReaders == 0
				})
				return
			}
			e.eventually(ftPatience, "the lock free in Redis", func() bool {
				l, err := other.TryLock(e.ctx)
				if err == nil {
					_ = other.Unlock(l)
				}
				return err == nil
			})
		})
	}
}
