package lua

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Ints decodes the reply of a lock script: its numbers, which the script
// returns as one integer, as a string of integers separated by spaces (see
// lock_reply in publish_lib.lua), or as an array of integers. Redis turns a
// Lua table into an array reply at several times the cost of a string or an
// integer (it asks each table for the fields of every reply type), which an
// uncontended Lock and Unlock paid for on every call; the table form stays
// readable for replies that are rare. The error is the script's, or names a
// reply of another shape.
func Ints(res rueidis.RedisResult) ([]int64, error) {
	msg, err := res.ToMessage()
	if err != nil {
		return nil, err
	}
	switch {
	case msg.IsInt64():
		n, err := msg.AsInt64()
		return []int64{n}, err
	case msg.IsString():
		s, _ := msg.ToString()
		fields := strings.Fields(s)
		if len(fields) == 0 {
			return nil, fmt.Errorf("lua: script reply %q holds no numbers", s)
		}
		vals := make([]int64, len(fields))
		for i, f := range fields {
			if vals[i], err = strconv.ParseInt(f, 10, 64); err != nil {
				return nil, fmt.Errorf("lua: script reply %q: %w", s, err)
			}
		}
		return vals, nil
	}
	return msg.AsIntSlice()
}
