package pubsub_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/relockio/relock/internal/redistest"
	"github.com/relockio/relock/pubsub"
)

// A Waiter's channel stays subscribed while idle channels of its
// connection are let go, with sharded pub/sub as with classic: no publish
// on it reaches no subscriber. (Sharded, the idle channels were let go by
// closing the connection and subscribing the live one again: 19 of 958
// SPUBLISHes in such a run reached no one, and a grant published then is
// taken back, its waiter losing its place.)
func TestRetiringIdleChannelsKeepsLiveOnes(t *testing.T) {
	for _, mode := range []string{"sharded", "classic"} {
		t.Run(mode, func(t *testing.T) {
			c := redistest.NewCluster(t, 1, 0)
			ctx := mxContext(t)
			opts := []pubsub.Option{pubsub.WithLinger(0)}
			publish := "SPUBLISH"
			if mode == "classic" {
				opts, publish = append(opts, pubsub.WithSharding(pubsub.ShardingClassic)), "PUBLISH"
			}
			m := mxNew(t, redistest.ClusterClient(t, c), opts...)
			prefix := redistest.KeyPrefix(t)
			live := prefix + "{a}:live"
			w := mxSubscribe(ctx, t, m, live)
			defer w.Leave(true)
			srv := c.Masters[0]
			unheard, total := 0, 0
			for i := range 20 {
				// A channel subscribed and left idle: its connection lets it go.
				mxSubscribe(ctx, t, m, fmt.Sprintf("%s{i%d}:idle", prefix, i)).Leave(true)
				for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); total++ {
					r, err := srv.Do(ctx, publish, live, "1")
					if err != nil {
						t.Fatal(err)
					}
					if n, _ := r.AsInt64(); n == 0 {
						unheard++
					}
				}
			}
			if unheard > 0 {
				t.Errorf("%d of %d publishes on the live channel reached no subscriber while idle channels were let go", unheard, total)
			}
			// The idle channels are let go all the same.
			for deadline := time.Now().Add(5 * time.Second); m.Stats().Channels > 1; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("idle channels kept: %+v", m.Stats())
				}
			}
		})
	}
}
