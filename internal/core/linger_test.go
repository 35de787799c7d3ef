package core

import (
	"testing"
	"time"
)

func TestTurnLinger(t *testing.T) {
	const limit = time.Millisecond
	for _, c := range []struct {
		gap, want time.Duration
	}{
		{0, limit},                    // no gap seen yet: the configured linger
		{time.Microsecond, limit / 4}, // a quick worker: the floor
		{50 * time.Microsecond, 400 * time.Microsecond}, // 8 gaps
		{300 * time.Microsecond, limit},                 // capped
	} {
		if got := TurnLinger(limit, c.gap); got != c.want {
			t.Errorf("TurnLinger(%v, %v) = %v, want %v", limit, c.gap, got, c.want)
		}
	}
}

func TestNoteRelockGap(t *testing.T) {
	est := NoteRelockGap(0, 10*time.Microsecond)
	if est != 10*time.Microsecond {
		t.Fatalf("first gap: %v", est)
	}
	if est = NoteRelockGap(est, 800*time.Microsecond); est != 800*time.Microsecond {
		t.Fatalf("a longer gap is taken at once: %v", est)
	}
	for range 40 {
		est = NoteRelockGap(est, 10*time.Microsecond)
	}
	if est != 10*time.Microsecond {
		t.Fatalf("a slow relock is forgotten over the following ones: %v", est)
	}
	if est = NoteRelockGap(0, 0); est <= 0 {
		t.Fatalf("a zero gap still counts as seen: %v", est)
	}
}
