package grpcgo

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

// TestGoFifoConsumption: the Go client's SimpleConsumer in an orderly group receives each
// message group's messages in send order, exactly once, and never a message of a group whose
// earlier message it holds unacknowledged.
func TestGoFifoConsumption(t *testing.T) {
	app := startDevApp(t, "the test makes its group orderly with `tidemark admin`", false)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-fifo-" + suffix
	group := "go-fifo-group-" + suffix
	// RocketMQ 5: FIFO delivery is the consumer group's property, set by an admin.
	app.admin("group-create", "-c", "DefaultCluster", "-g", group, "--orderly")
	producer := app.producer(topic)

	groups := []string{"order-a", "order-b", "order-c"}
	const perGroup = 3
	for i := 0; i < perGroup; i++ {
		for _, g := range groups {
			msg := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("%s/%d", g, i))}
			msg.SetTag("TagF")
			msg.SetMessageGroup(g)
			if _, err := producer.Send(ctx, msg); err != nil {
				t.Fatalf("send %s/%d: %v", g, i, err)
			}
		}
	}

	consumer := app.simpleConsumer(group, topic, awaitDuration)

	next := map[string]int{}       // per message group: the index expected next
	held := map[string]bool{}      // groups with a received, unacknowledged message
	var pending []*rmq.MessageView // received, not yet acknowledged
	receiveTwo := func() []*rmq.MessageView {
		// Two at a time: more of a group than one receive takes, so holding them must block the rest.
		views := receive(ctx, t, consumer, 2, 20*time.Second)
		if os.Getenv("FIFO_DEBUG") != "" {
			for _, v := range views {
				t.Logf("  got %s (offset %d)", v.GetBody(), v.GetOffset())
			}
		}
		return views
	}
	take := func(views []*rmq.MessageView) {
		for _, view := range views {
			g := ""
			if view.GetMessageGroup() != nil {
				g = *view.GetMessageGroup()
			}
			want := fmt.Sprintf("%s/%d", g, next[g])
			if got := string(view.GetBody()); got != want {
				t.Fatalf("group %q: received %q, want %q (out of order or repeated)", g, got, want)
			}
			next[g]++
			held[g] = true
			pending = append(pending, view)
		}
	}
	rounds := 0
	for total(next) < perGroup*len(groups) {
		rounds++
		if ctx.Err() != nil || rounds > 60 {
			t.Fatalf("received %v of %d per group after %d rounds", next, perGroup, rounds)
		}
		started := time.Now()
		got := receiveTwo()
		if os.Getenv("FIFO_DEBUG") != "" {
			t.Logf("round %d: %d messages in %v", rounds, len(got), time.Since(started).Round(time.Millisecond))
		}
		take(got)
		if len(pending) == 0 {
			continue
		}
		// Holding those unacknowledged (checked in the first rounds; each check waits out a
		// long poll): whatever else arrives must be of other groups, and must itself start
		// where its group stands.
		var more []*rmq.MessageView
		if rounds <= 3 {
			more = receiveTwo()
		}
		for _, view := range more {
			if g := view.GetMessageGroup(); g != nil && held[*g] {
				t.Fatalf("received %q while an earlier message of group %q was unacknowledged",
					view.GetBody(), *g)
			}
		}
		take(more)
		for _, view := range pending {
			if err := consumer.Ack(ctx, view); err != nil {
				t.Fatalf("ack %q: %v", view.GetBody(), err)
			}
		}
		pending = nil
		held = map[string]bool{}
	}
	t.Logf("FIFO: %d messages in %d groups received in order, exactly once, in %d rounds",
		total(next), len(groups), rounds)
	// Nothing comes again once everything is acknowledged.
	if again := receiveTwo(); len(again) != 0 {
		t.Fatalf("received %d messages again after all were acknowledged (first %q)", len(again), again[0].GetBody())
	}
}

func total(counts map[string]int) int {
	sum := 0
	for _, n := range counts {
		sum += n
	}
	return sum
}
