package slot

import "testing"

// Of agrees with Redis's CLUSTER KEYSLOT (values taken from Redis).
func TestOf(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo":                  12182,
		"bar":                  5061,
		"{foo}:unlock":         12182,
		"x:{bar}:to:y":         5061,
		"{}foo":                CRC16("{}foo") & 16383,
		"{user1000}.following": Of("user1000"),
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
	if CRC16("123456789") != 0x31C3 {
		t.Error("CRC16 is not CRC-16/XMODEM")
	}
}
