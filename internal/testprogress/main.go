// Command testprogress turns the output of `go test -json` into progress
// lines, so that a long test run (make test) is never silent for long:
//
//	go test -json ./... | go run ./internal/testprogress
//
// It prints one line per finished top-level test (PASS, FAIL or SKIP, the
// package, the test and its elapsed time), go test's own closing line per
// package ("ok  <pkg> <time>", "FAIL <pkg>", "?  <pkg> [no test files]"),
// the whole output of every failed test, package and build, and a heartbeat
// ("... still running: <pkg> <test> (Ns)") when nothing was printed for 8s.
// It ends with "N passed, N failed, N skipped" (top-level tests) and exits 1
// when a test, a package or a build failed, or the input ended before the
// packages it started did.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// quiet is how long the printer may stay silent before a heartbeat.
const quiet = 8 * time.Second

func main() {
	os.Exit(run(os.Stdin, os.Stdout, quiet))
}

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output and build-fail events
	FailedBuild string // a package's fail event when its build failed
}

type testKey struct{ pkg, test string }

type running struct {
	start time.Time
	out   []string
}

// printer keeps what a run has shown so far; mu guards it against the
// heartbeat goroutine.
type printer struct {
	mu      sync.Mutex
	w       io.Writer
	last    time.Time // when a line was last printed
	tests   map[testKey]*running
	pkgs    map[string]*running
	builds  map[string][]string // build output by import path, until shown
	shown   map[string]bool     // import paths whose build output was shown
	passed  int
	failed  int
	skipped int
	badPkgs []string
	broken  bool // a build failed, or the input was cut short
	seen    bool // an event was read
}

func newPrinter(w io.Writer) *printer {
	return &printer{
		w: w, last: time.Now(),
		tests: map[testKey]*running{}, pkgs: map[string]*running{},
		builds: map[string][]string{}, shown: map[string]bool{},
	}
}

// run reads the event stream from r until EOF, prints progress to w, and
// returns the exit status. A heartbeat is printed whenever nothing was for
// the quiet period.
func run(r io.Reader, w io.Writer, quiet time.Duration) int {
	p := newPrinter(w)
	stop := make(chan struct{})
	done := make(chan struct{})
	go p.heartbeat(quiet, stop, done)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			p.line(line)
		}
		if err != nil {
			break
		}
	}
	close(stop)
	<-done
	return p.finish()
}

// line handles one line of input: an event, or anything else (printed as is).
func (p *printer) line(line string) {
	var e event
	p.mu.Lock()
	defer p.mu.Unlock()
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
		p.print(strings.TrimRight(line, "\n"))
		return
	}
	p.seen = true
	switch {
	case e.Action == "build-output":
		p.builds[e.ImportPath] = append(p.builds[e.ImportPath], e.Output)
	case e.Action == "build-fail":
		p.broken = true
		p.showBuild(e.ImportPath)
	case e.Test != "":
		p.testEvent(e)
	default:
		p.packageEvent(e)
	}
}

func (p *printer) testEvent(e event) {
	k := testKey{e.Package, e.Test}
	t := p.tests[k]
	if t == nil {
		t = &running{start: time.Now()}
		p.tests[k] = t
	}
	switch e.Action {
	case "output":
		t.out = append(t.out, e.Output)
	case "pass", "fail", "skip":
		delete(p.tests, k)
		p.testDone(e, t)
	}
}

// testDone prints a finished test: a line for a top-level one, the whole
// output of any that failed (subtests too, as they finish).
func (p *printer) testDone(e event, t *running) {
	sub := strings.Contains(e.Test, "/")
	if e.Action == "fail" {
		p.print(fmt.Sprintf("--- output of %s %s:", e.Package, e.Test))
		p.printAll(t.out)
	}
	if sub {
		return
	}
	switch e.Action {
	case "pass":
		p.passed++
	case "fail":
		p.failed++
	case "skip":
		p.skipped++
	}
	p.print(fmt.Sprintf("%-4s %s %s (%.2fs)", strings.ToUpper(e.Action), e.Package, e.Test, e.Elapsed))
}

func (p *printer) packageEvent(e event) {
	pk := p.pkgs[e.Package]
	if pk == nil {
		pk = &running{start: time.Now()}
		p.pkgs[e.Package] = pk
	}
	switch e.Action {
	case "output":
		pk.out = append(pk.out, e.Output)
	case "pass", "skip":
		delete(p.pkgs, e.Package)
		p.packageClosing(e, pk)
	case "fail":
		delete(p.pkgs, e.Package)
		p.packageFailed(e, pk)
	}
}

// packageClosing prints go test's closing line of a package that passed or
// had no tests, or one like it when the stream carried none.
func (p *printer) packageClosing(e event, pk *running) {
	for _, l := range pk.out {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "? ") {
			p.print(strings.TrimRight(l, "\n"))
			return
		}
	}
	if e.Action == "skip" {
		p.print(fmt.Sprintf("?   \t%s\t[no test files]", e.Package))
	} else {
		p.print(fmt.Sprintf("ok  \t%s\t%.3fs", e.Package, e.Elapsed))
	}
}

// packageFailed shows everything a failed package left unshown: its build
// output, the output of its tests still running (a panic, a timeout), and
// its own output, which ends with go test's FAIL line.
func (p *printer) packageFailed(e event, pk *running) {
	p.badPkgs = append(p.badPkgs, e.Package)
	if e.FailedBuild != "" {
		p.broken = true
		p.showBuild(e.FailedBuild)
	}
	p.flushTests(e.Package)
	p.printAll(pk.out)
	for _, l := range pk.out {
		if strings.HasPrefix(l, "FAIL\t"+e.Package) {
			return
		}
	}
	p.print("FAIL\t" + e.Package)
}

// flushTests prints, and forgets, the output of the tests of pkg that did
// not finish ("" for every package).
func (p *printer) flushTests(pkg string) {
	var keys []testKey
	for k := range p.tests {
		if pkg == "" || k.pkg == pkg {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].pkg+" "+keys[i].test < keys[j].pkg+" "+keys[j].test
	})
	for _, k := range keys {
		p.print(fmt.Sprintf("--- output of %s %s (did not finish):", k.pkg, k.test))
		p.printAll(p.tests[k].out)
		delete(p.tests, k)
	}
}

func (p *printer) showBuild(path string) {
	if p.shown[path] {
		return
	}
	p.shown[path] = true
	p.print("--- build failed: " + path)
	p.printAll(p.builds[path])
	delete(p.builds, path)
}

func (p *printer) printAll(out []string) {
	for _, l := range out {
		p.print(strings.TrimRight(l, "\n"))
	}
}

// print writes one line; p.mu is held.
func (p *printer) print(s string) {
	fmt.Fprintln(p.w, s)
	p.last = time.Now()
}

// heartbeat prints what is still running whenever nothing was printed for
// quiet, until stop is closed.
func (p *printer) heartbeat(quiet time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(min(quiet/8, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			p.mu.Lock()
			if now.Sub(p.last) >= quiet {
				p.print("... still running: " + p.oldest(now))
			}
			p.mu.Unlock()
		}
	}
}

// oldest names the longest-running top-level test, else the longest-running
// package; p.mu is held.
func (p *printer) oldest(now time.Time) string {
	name, since := "", now
	for k, t := range p.tests {
		if !strings.Contains(k.test, "/") && (t.start.Before(since) || name == "") {
			name, since = k.pkg+" "+k.test, t.start
		}
	}
	if name == "" {
		for pkg, t := range p.pkgs {
			if t.start.Before(since) || name == "" {
				name, since = pkg, t.start
			}
		}
	}
	if name == "" {
		return "go test (building)"
	}
	return fmt.Sprintf("%s (%.0fs)", name, now.Sub(since).Seconds())
}

// finish shows what never finished and the totals, and returns the exit
// status.
func (p *printer) finish() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tests) > 0 || len(p.pkgs) > 0 {
		p.broken = true
		p.flushTests("")
		pkgs := make([]string, 0, len(p.pkgs))
		for pkg := range p.pkgs {
			pkgs = append(pkgs, pkg)
		}
		sort.Strings(pkgs)
		for _, pkg := range pkgs {
			p.printAll(p.pkgs[pkg].out)
			p.print("FAIL\t" + pkg + " (the input ended before the package did)")
		}
		p.badPkgs = append(p.badPkgs, pkgs...)
	}
	for path := range p.builds { // build output of a build that never failed: warnings
		p.printAll(p.builds[path])
	}
	if !p.seen {
		p.broken = true
		p.print("FAIL: no test events read (was the input go test -json?)")
	}
	if len(p.badPkgs) > 0 {
		p.print(fmt.Sprintf("FAIL: %d package(s): %s", len(p.badPkgs), strings.Join(p.badPkgs, " ")))
	} else if p.broken {
		p.print("FAIL: a build failed")
	}
	p.print(fmt.Sprintf("%d passed, %d failed, %d skipped", p.passed, p.failed, p.skipped))
	if p.failed > 0 || len(p.badPkgs) > 0 || p.broken {
		return 1
	}
	return 0
}
