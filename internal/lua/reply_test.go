package lua

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relockio/relock/internal/redistest"
)

// Ints reads a script's numbers in each shape a script returns them: a lone
// integer, lock_reply's string (tokens of 16 digits among them, which a
// number concatenated as is would print as 1.7e+15), and an array; and names
// a reply that is neither.
func TestIntsReadsEveryReplyShape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := redistest.Client(t, redistest.Owned(t))
	reply := rueidis.NewLuaScript(script(publishLibSrc, `
if ARGV[1] == 'one' then return -2 end
if ARGV[1] == 'string' then return lock_reply(1, 1795883287858434, -1, 0) end
if ARGV[1] == 'array' then return {0, 5, 1795883287858434} end
return 'one two'`))
	for _, tc := range []struct {
		shape string
		want  []int64
	}{
		{"one", []int64{-2}},
		{"string", []int64{1, 1795883287858434, -1, 0}},
		{"array", []int64{0, 5, 1795883287858434}},
	} {
		got, err := Ints(reply.Exec(ctx, rc, []string{"k"}, []string{tc.shape}))
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.shape, got, err, tc.want)
		}
	}
	if got, err := Ints(reply.Exec(ctx, rc, []string{"k"}, []string{"words"})); err == nil {
		t.Errorf("a reply of words: %v, no error", got)
	}
}
