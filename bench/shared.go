package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The correctness counters live in a file that the bench and its workers map
// into memory, one int64 per lock: a counter++ inside the lock costs no round
// trip, so a critical section of 0 is really empty and the lock's own cost is
// what the figures show; Redis sees only the contenders' commands.

// newCounterFile creates a zeroed counter file for locks counters, in
// /dev/shm when the machine has it.
func newCounterFile(locks int) (string, error) {
	dir := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = "/dev/shm"
	}
	f, err := os.CreateTemp(dir, "relock-bench-counters-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Truncate(int64(8 * max(locks, 1))); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// readCounterFile returns the counters of a run once its workers are done.
func readCounterFile(path string, locks int) (map[int]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8*locks {
		return nil, fmt.Errorf("counter file %s: %d bytes for %d counters", path, len(b), locks)
	}
	out := map[int]int64{}
	for i := range locks {
		if n := int64(binary.NativeEndian.Uint64(b[8*i:])); n != 0 {
			out[i] = n
		}
	}
	return out, nil
}

// sharedCounters is a counter file mapped into this process.
type sharedCounters struct{ mem []byte }

func mapCounterFile(path string, locks int) (*sharedCounters, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8*max(locks, 1), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &sharedCounters{mem: mem}, nil
}

func (c *sharedCounters) slot(lock int) *int64 {
	return (*int64)(unsafe.Pointer(&c.mem[8*lock]))
}

// increment is a deliberately non-atomic counter++ (a load, then a store):
// two holders at once can lose an update. (Overlaps are also caught, more
// surely, by comparing the holders' timestamps.) It returns the new value,
// the ordinal of this acquisition of the lock (see holdFor).
func (c *sharedCounters) increment(lock int) int64 {
	p := c.slot(lock)
	n := atomic.LoadInt64(p) + 1
	atomic.StoreInt64(p, n)
	return n
}

func (c *sharedCounters) load(lock int) int64 { return atomic.LoadInt64(c.slot(lock)) }

func (c *sharedCounters) close() {
	if c != nil && c.mem != nil {
		_ = syscall.Munmap(c.mem)
		c.mem = nil
	}
}
