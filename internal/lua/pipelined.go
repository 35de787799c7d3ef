package lua

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// Pipelined is a script sent many times at once in one DoMulti (the
// watchdog's renewals, one call per batch of holds of one cluster slot), which
// rueidis.Lua cannot do without loading the script on every node first. The
// caller sends EvalSha commands and resends, as Eval, those answered NOSCRIPT
// (after a restart or SCRIPT FLUSH).
type Pipelined struct {
	src string
	sha string
}

func newPipelined(src string) *Pipelined {
	sum := sha1.Sum([]byte(src))
	return &Pipelined{src: src, sha: hex.EncodeToString(sum[:])}
}

// EvalSha is the script's EVALSHA command on keys and args.
func (p *Pipelined) EvalSha(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Evalsha().Sha1(p.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// Eval is the script's EVAL command on keys and args, for a server that
// answered EvalSha with NOSCRIPT.
func (p *Pipelined) Eval(b rueidis.Builder, keys, args []string) rueidis.Completed {
	return b.Eval().Script(p.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}
