package broker

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisSetup deletes the stream of the test's topic.
func redisSetup(t *testing.T, topic string) string {
	need(t, "Redis", redisURL)
	t.Cleanup(func() {
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Logf("cleaning up: %v", err)
			return
		}
		c := redis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := c.Del(ctx, topic).Err(); err != nil {
			t.Logf("deleting stream %s: %v", topic, err)
		}
	})
	return redisURL
}

func TestRedisGroupShares(t *testing.T) {
	t.Parallel()
	topic := "entoutbox.share." + randomSuffix()
	testGroupShares(t, redisSetup(t, topic), topic)
}
