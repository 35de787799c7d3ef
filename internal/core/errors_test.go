package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relockio/relock/internal/core"
)

// TestQuote: a short name is quoted whole; a long one shows its first
// QuoteMax bytes, cut at a character boundary, and its length, however many
// bytes quoting it whole would take.
func TestQuote(t *testing.T) {
	if got := core.Quote("orders:42"); got != `"orders:42"` {
		t.Errorf("Quote(short) = %s", got)
	}
	exact := strings.Repeat("a", core.QuoteMax)
	if got := core.Quote(exact); got != `"`+exact+`"` {
		t.Errorf("Quote(%d bytes) = %s, want it whole", core.QuoteMax, got)
	}
	long := strings.Repeat("\x01", 600)
	want := `"` + strings.Repeat(`\x01`, core.QuoteMax) + `"... (600 bytes)`
	if got := core.Quote(long); got != want {
		t.Errorf("Quote(600 control bytes) = %s, want %s", got, want)
	}
	// "é" is two bytes: at an odd offset the cut falls inside one, and backs off.
	accented := "x" + strings.Repeat("é", 100)
	got := core.Quote(accented)
	if want := `"x` + strings.Repeat("é", (core.QuoteMax-2)/2) + `"... (201 bytes)`; got != want {
		t.Errorf("Quote(accented) = %s, want %s", got, want)
	}
	if !utf8.ValidString(got) {
		t.Errorf("Quote cut a character: %q", got)
	}
}

// TestValidateNameTruncates: the error for a 600-byte invalid name quotes a
// bounded part of it (it quoted all of it, 2.4KB for control bytes).
func TestValidateNameTruncates(t *testing.T) {
	invalid := errors.New("pkg: invalid name")
	for _, name := range []string{strings.Repeat("\x01", 600), strings.Repeat("a", 599) + "{", "\xff" + strings.Repeat("a", 599)} {
		err := core.ValidateName(name, invalid)
		if !errors.Is(err, invalid) {
			t.Fatalf("ValidateName(600 bytes) = %v, want the invalid sentinel", err)
		}
		if msg := err.Error(); len(msg) > 400 || !strings.Contains(msg, "... (600 bytes)") {
			t.Errorf("ValidateName(600 bytes): %d-byte message %q, want it truncated with the length", len(msg), msg)
		}
	}
}

// TestInner: Inner drops the package prefix of a nested error's text, once,
// and leaves errors.Is and errors.As to see the error unchanged.
func TestInner(t *testing.T) {
	err := fmt.Errorf("semaphore: release %q: %w", "x", core.Inner(core.ErrClosed))
	if got := err.Error(); got != `semaphore: release "x": client closed` {
		t.Errorf("message = %q", got)
	}
	if !errors.Is(err, core.ErrClosed) {
		t.Error("errors.Is(ErrClosed) lost through Inner")
	}
	ae := &core.AbandonError{Op: "release", Err: errors.New("boom")}
	var target *core.AbandonError
	if !errors.As(fmt.Errorf("rlock: x: %w", core.Inner(ae)), &target) || target != ae {
		t.Error("errors.As lost through Inner")
	}
	if core.Inner(nil) != nil {
		t.Error("Inner(nil) is not nil")
	}
	if got := core.Inner(errors.New("no prefix")).Error(); got != "no prefix" {
		t.Errorf("Inner of an unprefixed error = %q", got)
	}
}

// TestRebrand: a rebranded sentinel reads its own way and matches both
// itself and the shared sentinel it stands for.
func TestRebrand(t *testing.T) {
	lost := core.Rebrand("semaphore: lease lost", core.ErrLeaseLost)
	cause := fmt.Errorf("%w: %w", lost, core.Inner(core.ErrClosed))
	if got := cause.Error(); got != "semaphore: lease lost: client closed" {
		t.Errorf("message = %q", got)
	}
	for _, target := range []error{lost, core.ErrLeaseLost, core.ErrClosed} {
		if !errors.Is(cause, target) {
			t.Errorf("errors.Is(%v) = false", target)
		}
	}
	if errors.Is(core.ErrLeaseLost, lost) {
		t.Error("the shared sentinel matches the rebranded one")
	}
}
