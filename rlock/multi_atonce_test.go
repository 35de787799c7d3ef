package rlock_test

// MultiLock sends its members' releases at once: a set costs one round trip
// to give back, not one a member.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/rlock"
)

// barrierClient holds back, while armed, every script call on a key that
// contains its mark, until want of them wait together or patience runs out,
// and records the most that waited together. Calls in sequence never meet
// there: the most is 1, each held for the whole patience.
type barrierClient struct {
	rueidis.Client
	mark     string
	want     int
	patience time.Duration

	mu      sync.Mutex
	armed   bool
	pass    int // calls to let through before holding any back
	waiting int
	most    int
	met     chan struct{}
	closed  bool
}

// arm holds calls back from now on, after letting the first pass through.
func (b *barrierClient) arm(want, pass int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed, b.want, b.pass, b.waiting, b.most = true, want, pass, 0, 0
	b.met, b.closed = make(chan struct{}), false
}

func (b *barrierClient) disarm() (most int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	return b.most
}

func (b *barrierClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if met := b.arrive(cmd.Commands()); met != nil {
		select {
		case <-met:
		case <-time.After(b.patience):
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}
	return b.Client.Do(ctx, cmd)
}

// arrive counts a held-back call and returns the channel closed when enough
// have arrived; nil for a call that passes at once.
func (b *barrierClient) arrive(args []string) chan struct{} {
	if len(args) < 4 || !redistest.IsScript(args) || !strings.Contains(strings.Join(args[3:], " "), b.mark) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.armed {
		return nil
	}
	if b.pass > 0 {
		b.pass--
		return nil
	}
	b.waiting++
	b.most = max(b.most, b.waiting)
	if b.waiting == b.want && b.most == b.want && !b.closed {
		close(b.met)
		b.closed = true
	}
	return b.met
}

// Unlock of a set of three, and the release of what a failed TryLock took,
// send the members' release scripts together: all three are in flight at
// once, where releasing in turn would have one at a time.
func TestMultiLockReleasesMembersAtOnce(t *testing.T) {
	e := ftNewEnv(t)
	bc := &barrierClient{Client: redistest.Client(t, e.srv), mark: "{at-once-", patience: 2 * time.Second}
	c, other := e.clientOn(bc), e.client()
	e.warmUp(c, other)
	names := []string{"at-once-a", "at-once-b", "at-once-c"}

	ml := c.MultiLock(names...)
	lc, err := ml.Lock(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	bc.arm(len(names), 0)
	err = ml.Unlock(lc)
	if most := bc.disarm(); most != len(names) {
		t.Errorf("Unlock: at most %d member releases in flight together, want %d", most, len(names))
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if e.exists(e.lockKey(n)) {
			t.Errorf("member %s still locked after Unlock", n)
		}
	}

	// The fourth member, taken elsewhere (its name, last in order, has no
	// mark), fails TryLock after it took the three before it, one script
	// each, let through.
	lo := ftLock(t, e.ctx, other.Mutex("zz-at-once-d"))
	bc.arm(len(names), len(names))
	_, err = c.MultiLock(append(names, "zz-at-once-d")...).TryLock(e.ctx)
	if most := bc.disarm(); most != len(names) {
		t.Errorf("failed TryLock: at most %d member releases in flight together, want %d", most, len(names))
	}
	if !errors.Is(err, rlock.ErrLocked) {
		t.Fatalf("TryLock with a member taken: %v, want ErrLocked", err)
	}
	for _, n := range names {
		if e.exists(e.lockKey(n)) {
			t.Errorf("member %s left locked after a failed TryLock", n)
		}
	}
	mustUnlockFT(t, other.Mutex("zz-at-once-d"), lo)
}
