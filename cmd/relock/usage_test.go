package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// -h prints the usage and exits 0; a command line without a command prints
// it and exits 2, as does an unknown flag.
func TestUsageExitCodes(t *testing.T) {
	bin := build(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"-help"}, 0},
		{nil, 2},
		{[]string{"-no-such-flag"}, 2},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("relock %v: %v", tc.args, err)
		}
		if code != tc.code {
			t.Errorf("relock %v exited %d, want %d; output:\n%s", tc.args, code, tc.code, out)
		}
		if !strings.Contains(string(out), "usage: relock") {
			t.Errorf("relock %v printed no usage:\n%s", tc.args, out)
		}
	}
}
