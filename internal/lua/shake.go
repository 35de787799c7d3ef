package lua

import (
	"strings"
	"sync"
)

// Redis runs an EVAL script's whole source at every call, and every
// `local function` it defines is a closure made anew, called or not (see
// contendedMark). The libraries hold every helper of a lock kind; a script
// sent by EVALSHA carries only the helpers its body can reach (shake), so
// that, say, an uncontended Unlock does not make the hand-off's functions.
// The Redis function libraries (functions.go) keep every helper: they are
// made once per load, not per call.
//
// The libraries are written so that this needs no Lua parser: a helper runs
// from a line "local function name(...)" to the next line that is exactly
// "end", every line between them indented or empty; every other top-level
// statement (constants, per-call state, script_begins hooks) is kept whole,
// and what it names is reached.
// A library that breaks this shape is used whole (TestShakeKeepsShape says
// so).

// libUnit is one top-level piece of a library: a helper function (name set)
// or anything else (name empty), with the identifiers its code names.
type libUnit struct {
	name string
	text string
	refs map[string]bool
}

// splitLibrary cuts lib into its units in order; ok is false when a helper
// does not have the shape above.
func splitLibrary(lib string) (units []libUnit, ok bool) {
	lines := strings.SplitAfter(lib, "\n")
	var other strings.Builder
	flush := func() {
		if other.Len() > 0 {
			units = append(units, libUnit{text: other.String(), refs: identifiers(other.String())})
			other.Reset()
		}
	}
	for i := 0; i < len(lines); i++ {
		name, isHelper := helperName(lines[i])
		if !isHelper {
			other.WriteString(lines[i])
			continue
		}
		if !strings.HasSuffix(strings.TrimRight(lines[i], "\r\n"), ")") {
			return nil, false
		}
		end := i + 1
		for end < len(lines) && strings.TrimRight(lines[end], "\r\n") != "end" {
			if line := strings.TrimRight(lines[end], "\r\n"); line != "" && line[0] != ' ' && line[0] != '\t' {
				return nil, false
			}
			end++
		}
		if end == len(lines) {
			return nil, false
		}
		flush()
		text := strings.Join(lines[i:end+1], "")
		units = append(units, libUnit{name: name, text: text, refs: identifiers(text)})
		i = end
	}
	flush()
	return units, true
}

// splitOnce is splitLibrary, done once per library: every script of a lock
// kind shakes the same library (at package initialisation).
func splitOnce(lib string) ([]libUnit, bool) {
	splits.mu.Lock()
	defer splits.mu.Unlock()
	if s, ok := splits.m[lib]; ok {
		return s.units, s.ok
	}
	units, ok := splitLibrary(lib)
	if splits.m == nil {
		splits.m = make(map[string]split)
	}
	splits.m[lib] = split{units, ok}
	return units, ok
}

type split struct {
	units []libUnit
	ok    bool
}

var splits struct {
	mu sync.Mutex
	m  map[string]split
}

// helperName returns the name of the helper that line opens, if it opens one.
func helperName(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "local function ")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "(")
	return name, ok && name != "" && isIdentifier(name)
}

// shake returns lib's units that parts[0] needs, then parts[0], then the
// units parts[1] needs as well, then parts[1], and so on: each part finds
// defined, above it, every helper it or an earlier part can call, in the
// library's own order (a helper only calls helpers defined above it), and no
// helper made before a later part needs it. When lib does not have the shape
// shake relies on, every unit goes before parts[0].
func shake(lib string, parts ...string) string {
	units, ok := splitOnce(lib)
	if !ok {
		return lib + strings.Join(parts, "")
	}
	byName := make(map[string]int, len(units))
	for i, u := range units {
		if u.name != "" {
			byName[u.name] = i
		}
	}
	needed := make([]bool, len(units))
	var reach func(refs map[string]bool)
	reach = func(refs map[string]bool) {
		for ref := range refs {
			if i, ok := byName[ref]; ok && !needed[i] {
				needed[i] = true
				reach(units[i].refs)
			}
		}
	}
	for _, u := range units {
		if u.name == "" {
			reach(u.refs)
		}
	}
	var out strings.Builder
	out.Grow(len(lib) + len(strings.Join(parts, "")))
	placed := make([]bool, len(units))
	for _, part := range parts {
		reach(identifiers(part))
		for i, u := range units {
			if !placed[i] && (u.name == "" || needed[i]) {
				out.WriteString(u.text)
				placed[i] = true
			}
		}
		out.WriteString(part)
	}
	return out.String()
}

// identifiers returns the names that Lua code uses, outside comments and
// string literals (a name inside a string is never a call).
func identifiers(code string) map[string]bool {
	refs := map[string]bool{}
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '-' && strings.HasPrefix(code[i:], "--"):
			if strings.HasPrefix(code[i:], "--[[") {
				end := strings.Index(code[i:], "]]")
				if end < 0 {
					return refs
				}
				i += end + 2
				continue
			}
			end := strings.IndexByte(code[i:], '\n')
			if end < 0 {
				return refs
			}
			i += end + 1
		case c == '\'' || c == '"':
			i++
			for i < len(code) && code[i] != c && code[i] != '\n' {
				if code[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '[' && strings.HasPrefix(code[i:], "[["):
			end := strings.Index(code[i:], "]]")
			if end < 0 {
				return refs
			}
			i += end + 2
		case isIdentStart(c):
			start := i
			for i < len(code) && (isIdentStart(code[i]) || code[i] >= '0' && code[i] <= '9') {
				i++
			}
			refs[code[start:i]] = true
		default:
			i++
		}
	}
	return refs
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentifier(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isIdentStart(s[i]) && (i == 0 || s[i] < '0' || s[i] > '9') {
			return false
		}
	}
	return true
}
