package semaphore_test

// A waiter in a process of its own, which a test can kill (SIGKILL): the
// process dies with its connections, as a crashed or OOM-killed worker does.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/rlock"
	"github.com/relockio/relock/semaphore"
)

// waiterProcessEnv carries a waiterSpec to a test binary started as a waiter.
const waiterProcessEnv = "SEMAPHORE_TEST_WAITER"

type waiterSpec struct {
	Addr, Prefix, Name string
}

// waiterProcess is the main function of a waiter process: it waits for the
// Lock of spec's name and holds it, until it is killed or a minute passes
// (so that it never outlives a test that died without killing it).
func waiterProcess(spec string) int {
	var ws waiterSpec
	if err := json.Unmarshal([]byte(spec), &ws); err != nil {
		fmt.Fprintln(os.Stderr, "waiter process:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{ws.Addr}, DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter process:", err)
		return 2
	}
	c, err := rlock.New(rc, rlock.WithKeyPrefix(ws.Prefix))
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter process:", err)
		return 2
	}
	lockCtx, err := semaphore.NewLock(c, ws.Name).Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter process:", err)
		return 1
	}
	fmt.Println("acquired")
	<-ctx.Done()
	runtime.KeepAlive(lockCtx) // held until the test kills the process
	return 0
}

// startWaiterProcess starts a waiter process on the Lock called name, killed
// at cleanup if the test has not killed it.
func (e *env) startWaiterProcess(name string) *exec.Cmd {
	e.t.Helper()
	spec, _ := json.Marshal(waiterSpec{Addr: e.srv.Addr(), Prefix: e.prefix, Name: name})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterProcessEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting a waiter process: %v", err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
