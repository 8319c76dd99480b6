package grpcgo

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

// TestGoSimpleConsumerFollowsAReset: the Go client's SimpleConsumer has received and
// acknowledged ten messages of a one-queue topic; `tidemark admin reset-offset-by-time` moves
// its group, while it is online, to a time between the fifth and the sixth. What it receives
// next is the sixth, then the rest once more, in order, and nothing before it.
func TestGoSimpleConsumerFollowsAReset(t *testing.T) {
	app := startDevApp(t, "the test makes its topic and resets its group with `tidemark admin`", false)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-reset-" + suffix
	group := "go-reset-group-" + suffix
	app.admin("topic-create", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
	producer := app.producer(topic)
	const count, resetAt = 10, 5
	var sixthAfter int64
	for i := 0; i < count; i++ {
		if i == resetAt {
			// The sixth is stored well after this moment, the fifth well before it.
			time.Sleep(20 * time.Millisecond)
			sixthAfter = time.Now().UnixMilli()
			time.Sleep(20 * time.Millisecond)
		}
		msg := &rmq.Message{Topic: topic, Body: []byte(strconv.Itoa(i))}
		msg.SetTag("TagR")
		if _, err := producer.Send(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	consumer := app.simpleConsumer(group, topic, awaitDuration)
	// Receives and acknowledges until `want` messages came (or the test's time ran out).
	receiveAll := func(want int) []string {
		var got []string
		for len(got) < want && ctx.Err() == nil {
			for _, view := range receive(ctx, t, consumer, 16, 30*time.Second) {
				got = append(got, string(view.GetBody()))
				if err := consumer.Ack(ctx, view); err != nil {
					t.Fatalf("ack %q: %v", view.GetBody(), err)
				}
			}
		}
		return got
	}
	indexes := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}
	if first := receiveAll(count); !reflect.DeepEqual(first, indexes(0, count)) {
		t.Fatalf("the first pass received %v", first)
	}
	app.admin("reset-offset-by-time", "-g", group, "-t", topic, "-s", fmt.Sprint(sixthAfter), "--yes")
	replay := receiveAll(count - resetAt)
	if !reflect.DeepEqual(replay, indexes(resetAt, count)) {
		t.Fatalf("after the reset to %d the consumer received %v", resetAt, replay)
	}
	t.Logf("reset to %d: the Go SimpleConsumer received %v again, in order", resetAt, replay)
}
