package core

import (
	"strings"
	"testing"
)

func TestParseGrant(t *testing.T) {
	const secret = "00112233445566778899aabbccddeeff"
	good := GrantProof(secret, 7, 1, 2, 3)
	if g, ok := ParseGrant(good, secret, 3); !ok || g != (Grant{Arrival: 7, Fields: [MaxGrantFields]uint64{1, 2, 3}}) {
		t.Errorf("ParseGrant(%q) = %+v, %v", good, g, ok)
	}
	if g, ok := ParseGrant(GrantProof(secret, 5), secret, 0); !ok || g.Arrival != 5 {
		t.Errorf("a grant of no fields: %+v, %v", g, ok)
	}
	// Wrong shapes, numbers not as the scripts print them, forgeries.
	for _, in := range []string{"", ":", good + ":", "x" + good, GrantProof(secret, 0, 1, 2, 3), GrantProof(secret, 7, 1, 2),
		GrantProof(secret, 7, 1, 2, 3, 4), GrantProof("another secret", 7, 1, 2, 3), strings.ToUpper(good),
		strings.Replace(good, "7:1:", "7:01:", 1), strings.Replace(good, "7:1:", "7:+1:", 1), strings.Replace(good, "7:1:", "8:1:", 1),
		"7:1:2:3:" + strings.Repeat("0", 40), "18446744073709551616:1:2:3:" + strings.Repeat("0", 40)} {
		if g, ok := ParseGrant(in, secret, 3); ok {
			t.Errorf("ParseGrant(%q) = %+v: accepted", in, g)
		}
	}
	if _, ok := ParseGrant(good, "", 3); ok {
		t.Error("a grant was accepted without a secret")
	}
}
