package pubsub

import "testing"

// slotOf agrees with Redis's CLUSTER KEYSLOT (values taken from Redis).
func TestSlotOf(t *testing.T) {
	for ch, want := range map[string]uint16{
		"foo":                  12182,
		"bar":                  5061,
		"{foo}:unlock":         12182,
		"x:{bar}:to:y":         5061,
		"{}foo":                crc16("{}foo") & 16383,
		"{user1000}.following": slotOf("user1000"),
	} {
		if got := slotOf(ch); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", ch, got, want)
		}
	}
	if crc16("123456789") != 0x31C3 {
		t.Error("crc16 is not CRC-16/XMODEM")
	}
}
