package rlock

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
)

func TestParseAcquireReply(t *testing.T) {
	good := []struct {
		in   []int64
		want acquireReply
	}{
		{[]int64{1, 7, 1, 7, 0}, acquireReply{status: 1, token: 7, last: 7, count: 1}},
		{[]int64{1, 7, 1, 15, 3}, acquireReply{status: 1, token: 7, last: 15, count: 1, left: 3}},
		{[]int64{1, 0, 3, 0, 0}, acquireReply{status: 1, token: 0, count: 3}},
		{[]int64{0, 1500, 0}, acquireReply{status: 0, wait: 1500}},
		{[]int64{0, -1, 0}, acquireReply{status: 0, wait: -1}},
		{[]int64{0, 20, 1795339258522917}, acquireReply{status: 0, wait: 20, fence: 1795339258522917}},
		{[]int64{-1}, acquireReply{status: -1}},
		{[]int64{-2}, acquireReply{status: -2}},
		// The uncontended take's one number: its token.
		{[]int64{7}, acquireReply{status: 1, token: 7, last: 7, count: 1}},
	}
	for _, tc := range good {
		got, err := parseAcquireReply(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseAcquireReply(%v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range [][]int64{nil, {}, {0}, {1, 7}, {1, 7, 1}, {1, 7, 1, 7}, {1, -3, 1, 1, 0}, {1, 7, 0, 7, 0}, {1, 7, 1, 6, 0},
		{1, 7, 1, 7, -1}, {0, -2, 0}, {0, 5, -1}, {0, 5}, {-1, 0}, {-2, 1, 1}, {2, 1, 1}, {-3}, {1, 7, 1, 7, 1, 1}} {
		if got, err := parseAcquireReply(in); err == nil {
			t.Errorf("parseAcquireReply(%v) = %+v, want an error", in, got)
		}
	}
}

func TestParseGrant(t *testing.T) {
	const secret = "00112233445566778899aabbccddeeff"
	// A grant proves the arrival number of the place granted first (here 9).
	signed := func(secret, grant string) string {
		sum := sha1.Sum([]byte(secret + ":9:" + grant))
		return "9:" + grant + ":" + hex.EncodeToString(sum[:])
	}
	for in, want := range map[string]grant{"1:1:0": {1, 1, 0}, "42:50:7": {42, 50, 7},
		"18446744073709551615:18446744073709551615:0": {1<<64 - 1, 1<<64 - 1, 0}} {
		if g, ok := parseGrant(signed(secret, in), secret); !ok || g != want {
			t.Errorf("parseGrant(%q) = %+v, %v; want %+v", in, g, ok, want)
		}
	}
	for _, in := range []string{"", "1", "1:1", "0:0:0", "0:5:0", "5:4:0", "-1:2:0", "x:1:0", "1:y:0", "1:1:z", "1:1:-1",
		"1 2 0", ":", "1:", "1:1:", ":1:1", "18446744073709551616:18446744073709551617:0", "+1:2:0"} {
		if g, ok := parseGrant(signed(secret, in), secret); ok {
			t.Errorf("parseGrant(%q) = %+v, want no grant", in, g)
		}
	}
	// Without the secret no grant can be made, nor what it says changed.
	forged := []string{"9:1:2:0", "9:1:2:0:", "9:1:2:0:" + strings.Repeat("0", 40), signed("another secret", "1:2:0"),
		strings.Replace(signed(secret, "1:2:0"), "1:2:0", "1:3:0", 1), strings.Replace(signed(secret, "1:2:0"), "1:2:0", "1:2:5", 1),
		strings.Replace(signed(secret, "1:2:0"), "9:", "8:", 1), strings.ToUpper(signed(secret, "1:2:0"))}
	for _, in := range forged {
		if g, ok := parseGrant(in, secret); ok {
			t.Errorf("parseGrant(%q) = %+v: a forged grant was accepted", in, g)
		}
	}
}

// FuzzParseAcquireReply feeds arbitrary replies (the input's bytes read as
// big-endian int64s): parsing never panics, and what it accepts is one of the
// shapes acquire.lua returns.
func FuzzParseAcquireReply(f *testing.F) {
	enc := func(vals ...int64) []byte {
		b := make([]byte, 8*len(vals))
		for i, v := range vals {
			binary.BigEndian.PutUint64(b[8*i:], uint64(v))
		}
		return b
	}
	f.Add(enc(1, 7, 1, 15, 2))
	f.Add(enc(0, 1500, 0))
	f.Add(enc(0, -1, 1))
	f.Add(enc(-1))
	f.Add(enc(-2))
	f.Add(enc(1, -1, 1, 0, 0))
	f.Add(enc(1, 0, 2, 0, 0))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		vals := make([]int64, 0, len(data)/8)
		for len(data) >= 8 {
			vals = append(vals, int64(binary.BigEndian.Uint64(data)))
			data = data[8:]
		}
		r, err := parseAcquireReply(vals)
		if err != nil {
			if r != (acquireReply{}) {
				t.Fatalf("error %v with a non-zero reply %+v", err, r)
			}
			return
		}
		switch r.status {
		case 1:
			if len(vals) != 5 || r.count < 1 || r.token != uint64(vals[1]) || vals[1] < 0 || r.last < r.token || r.left < 0 {
				t.Fatalf("accepted %v as %+v", vals, r)
			}
		case 0:
			if len(vals) != 3 || r.wait < -1 || r.last != 0 || r.token != 0 {
				t.Fatalf("accepted %v as %+v", vals, r)
			}
		case -1, -2:
			if len(vals) != 1 {
				t.Fatalf("accepted %v as %+v", vals, r)
			}
		default:
			t.Fatalf("accepted status %d: %v", r.status, vals)
		}
	})
}

func TestParseRWAcquireReply(t *testing.T) {
	good := []struct {
		in   []int64
		want rwAcquireReply
	}{
		{[]int64{1, 7, 1}, rwAcquireReply{status: 1, token: 7, count: 1}},
		{[]int64{1, 0, 3}, rwAcquireReply{status: 1, count: 3}},
		{[]int64{0, 1500, 0}, rwAcquireReply{wait: 1500}},
		{[]int64{0, -1, 1795339258522000}, rwAcquireReply{wait: -1, arrival: 1795339258522000}},
		{[]int64{-1}, rwAcquireReply{status: -1}},
		{[]int64{-2}, rwAcquireReply{status: -2}},
	}
	for _, tc := range good {
		if got, err := parseRWAcquireReply(tc.in); err != nil || got != tc.want {
			t.Errorf("parseRWAcquireReply(%v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range [][]int64{nil, {}, {1}, {1, 7}, {1, 7, 0}, {1, -1, 1}, {0, 5}, {0, -2, 0}, {0, 5, -1}, {0, 5, 1, 1}, {-3}, {2, 1, 1}} {
		if got, err := parseRWAcquireReply(in); err == nil {
			t.Errorf("parseRWAcquireReply(%v) = %+v, want an error", in, got)
		}
	}
}

// rwProof is what rw_lib.lua sends a waiter with secret for its place
// arrival, granted under token: "arrival:token:mac".
func rwProof(secret, token, arrival string) string {
	sum := sha1.Sum([]byte(secret + ":" + arrival + ":" + token))
	return arrival + ":" + token + ":" + hex.EncodeToString(sum[:])
}

func TestParseWriteGrant(t *testing.T) {
	const secret = "00112233445566778899aabbccddeeff"
	grant := func(token, arrival string) string { return rwProof(secret, token, arrival) }
	if tok, ok := parseWriteGrant(grant("42", "1795339258522001"), secret, 1795339258522001); !ok || tok != 42 {
		t.Errorf("a good grant: %d, %v", tok, ok)
	}
	for _, in := range []string{"", "~3000", "42", "42:7", grant("0", "7"), grant("-1", "7"), grant("x", "7"), grant("42", "8"),
		grant("42", "07"), grant("42", "+7"), grant("18446744073709551616", "7"), grant("42", ""), grant("", "7")} {
		if tok, ok := parseWriteGrant(in, secret, 7); ok {
			t.Errorf("parseWriteGrant(%q) = %d: accepted", in, tok)
		}
	}
	// Without the secret no grant can be made, nor what it says changed.
	good := grant("42", "7")
	for _, in := range []string{"7:42:" + strings.Repeat("0", 40), rwProof("another secret", "42", "7"),
		strings.Replace(good, ":42:", ":43:", 1), strings.ToUpper(good)} {
		if tok, ok := parseWriteGrant(in, secret, 7); ok {
			t.Errorf("parseWriteGrant(%q) = %d: a forged grant was accepted", in, tok)
		}
	}
	if _, ok := parseWriteGrant(good, secret, 0); ok {
		t.Error("a grant was accepted by a waiter whose place is unknown")
	}
}

func TestParseReadGrant(t *testing.T) {
	const mine, other = "00112233445566778899aabbccddeeff", "ffeeddccbbaa99887766554433221100"
	batch := rwProof(other, "42", "5") + " " + rwProof(mine, "42", "7") + " " + rwProof(other, "42", "70")
	for arrival, want := range map[uint64]bool{7: true, 5: false, 70: false, 8: false, 0: false} {
		if tok, ok := parseReadGrant(batch, mine, arrival); ok != want || ok && tok != 42 {
			t.Errorf("place %d: parseReadGrant = %d, %v; want a grant: %v", arrival, tok, ok, want)
		}
	}
	for _, in := range []string{"", "~3000", "42", "42 ", "7", "7:", "7:42", rwProof(mine, "0", "7"),
		strings.Replace(rwProof(mine, "42", "7"), ":42:", ":43:", 1), rwProof(other, "42", "7"),
		strings.ToUpper(rwProof(mine, "42", "7")), "42:" + rwProof(mine, "42", "7"), "42 " + rwProof(mine, "42", "8")} {
		if tok, ok := parseReadGrant(in, mine, 7); ok {
			t.Errorf("parseReadGrant(%q) = %d: accepted", in, tok)
		}
	}
}

// parseVote reads every reply shape of quorum_acquire.lua, as Redis sends it
// (the replies come from scripts returning them), and refuses others.
func TestParseVote(t *testing.T) {
	srv := redistest.New(t)
	rc := redistest.Client(t, srv)
	ctx := context.Background()
	reply := func(lua string) []rueidis.RedisMessage {
		t.Helper()
		vals, err := rc.Do(ctx, rc.B().Eval().Script(lua).Numkeys(0).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		return vals
	}
	good := []struct {
		lua  string
		want vote
	}{
		{"return {1}", vote{kind: voteGranted}},
		{"return {0, 1500, 'q:7'}", vote{kind: voteTaken, wait: 1500, holder: "q:7"}},
		{"return {0, -1, ''}", vote{kind: voteTaken, wait: -1}},
		{"return {0, 20, 'q:7', '1795339258522'}", vote{kind: voteTaken, wait: 20, holder: "q:7", arrival: "1795339258522"}},
		{"return {3, 300, '1795339258522'}", vote{kind: voteTaken, wait: 300, reserved: true, arrival: "1795339258522"}},
	}
	for _, tc := range good {
		got, err := parseVote(reply(tc.lua))
		if err != nil || got.kind != tc.want.kind || got.wait != tc.want.wait || got.holder != tc.want.holder ||
			got.reserved != tc.want.reserved || got.arrival != tc.want.arrival {
			t.Errorf("parseVote(%s) = %+v, %v; want %+v", tc.lua, got, err, tc.want)
		}
	}
	for _, lua := range []string{"return {}", "return {-2}", "return {1, 2}", "return {0, 5}", "return {0, -2, 'q:7'}",
		"return {0, 5, 'q:7', '1', '2'}", "return {3, -1, '1'}", "return {3, 5}", "return {2}"} {
		if got, err := parseVote(reply(lua)); err == nil {
			t.Errorf("parseVote(%s) = %+v, want an error", lua, got)
		}
	}
}
