package core

import (
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// QueueEntry is a waiter's entry in the wait queue of any lock kind, as
// queue_lib.lua reads it: its owner field or permit id, the lease and claim
// window it asks a grant for, its secret, and what it asks for (per kind: ""
// for a Mutex, "r" or "w" for an RWMutex, the permits for a semaphore, with
// "=" + limit when it insists on that limit).
func QueueEntry(owner string, lease, claim time.Duration, secret, ask string) string {
	return owner + "/" + strconv.FormatInt(lease.Milliseconds(), 10) + "/" + strconv.FormatInt(claim.Milliseconds(), 10) + "/" +
		secret + "/" + ask
}

// NewSecret returns a waiter's secret: 128 random bits in hex, part of its
// queue entry, with which a grant to it proves itself (see ParseGrant).
func NewSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// MaxGrantFields is the most fields a grant carries besides its arrival
// number (the Mutex's: first and last token, waiters left).
const MaxGrantFields = 3

// Grant is what a proven grant message to a queued waiter says (see
// queue_lib.lua): the arrival number of the place granted, and the kind's
// fields.
type Grant struct {
	Arrival uint64
	Fields  [MaxGrantFields]uint64
}

// ParseGrant decodes the proof of a grant made to a queued waiter with
// secret, "arrival:f1:...:fn:mac" for n fields: decimal numbers as the
// scripts print them (no sign, no leading zero), the arrival number
// positive, and mac = sha1hex(secret:arrival:f1:...:fn). Anyone may publish
// on the channels grants go to; without the secret no one can forge a grant
// or alter what it says. That the grant is to the place the waiter's last
// check saw is for the caller to check (Arrival): no place is granted twice,
// so a grant recorded and published again after the waiter queued anew
// proves nothing.
func ParseGrant(data, secret string, n int) (g Grant, ok bool) {
	if secret == "" || n < 0 || n > MaxGrantFields {
		return Grant{}, false
	}
	cut := strings.LastIndexByte(data, ':')
	if cut < 0 {
		return Grant{}, false
	}
	body, mac := data[:cut], data[cut+1:]
	if len(mac) != 2*sha1.Size {
		return Grant{}, false
	}
	rest := body
	for i := 0; i <= n; i++ {
		field, after, found := strings.Cut(rest, ":")
		if found == (i == n) {
			return Grant{}, false // too few or too many fields
		}
		v, err := strconv.ParseUint(field, 10, 64)
		if err != nil || strconv.FormatUint(v, 10) != field {
			return Grant{}, false
		}
		if i == 0 {
			g.Arrival = v
		} else {
			g.Fields[i-1] = v
		}
		rest = after
	}
	if g.Arrival == 0 {
		return Grant{}, false
	}
	sum := sha1.Sum([]byte(secret + ":" + body))
	var want [2 * sha1.Size]byte
	hex.Encode(want[:], sum[:])
	if subtle.ConstantTimeCompare(want[:], []byte(mac)) != 1 {
		return Grant{}, false
	}
	return g, true
}

// GrantProof is the proof queue_lib.lua writes for a grant to the place
// arrival of a waiter with secret (see ParseGrant).
func GrantProof(secret string, arrival uint64, fields ...uint64) string {
	body := strconv.FormatUint(arrival, 10)
	for _, f := range fields {
		body += ":" + strconv.FormatUint(f, 10)
	}
	sum := sha1.Sum([]byte(secret + ":" + body))
	return body + ":" + hex.EncodeToString(sum[:])
}
