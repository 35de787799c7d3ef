// Package slot computes Redis Cluster hash slots, which rueidis does not
// export: the pub/sub multiplexer groups sharded subscriptions by slot, and
// the watchdog groups renewals by slot so that one script serves every hold
// of a slot.
package slot

import "strings"

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of returns the Redis Cluster slot of a key (or of a sharded channel): the
// CRC16 of its hash tag, the text between its first '{' and the next '}'
// when that is not empty, else of the whole key.
func Of(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return CRC16(key) & (Count - 1)
}

// CRC16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
