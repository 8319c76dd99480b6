package grpcgo

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// TestGoSimpleConsumerFollowsAReset: the Go client's SimpleConsumer has received and
// acknowledged ten messages of a one-queue topic; `tidemark admin reset-offset-by-time` moves
// its group, while it is online, to a time between the fifth and the sixth. What it receives
// next is the sixth, then the rest once more, in order, and nothing before it.
func TestGoSimpleConsumerFollowsAReset(t *testing.T) {
	bin := os.Getenv("TIDEMARK_BIN")
	if bin == "" {
		t.Skip("set TIDEMARK_BIN: the test makes its topic and resets its group with `tidemark admin`")
	}
	endpoint, srv := grpcEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() && srv != nil {
			t.Logf("server log tail:\n%s", srv.logTail(40))
		}
	})
	admin := func(args ...string) {
		t.Helper()
		full := append([]string{"admin"}, args...)
		full = append(full, "-n", srv.namesrv)
		if out, err := exec.Command(bin, full...).CombinedOutput(); err != nil {
			t.Fatalf("tidemark %v: %v\n%s", full, err, out)
		}
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-reset-" + suffix
	group := "go-reset-group-" + suffix
	admin("topic-create", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")

	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("gRPC address %q: %v", endpoint, err)
	}
	plaintext := net.JoinHostPort(plaintextHost, port)
	creds := &credentials.SessionCredentials{}
	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: plaintext, Credentials: creds},
		rmq.WithTopics(topic))
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	if err := producer.Start(); err != nil {
		t.Fatalf("producer.Start: %v", err)
	}
	defer producer.GracefulStop()
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

	consumer, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: plaintext, ConsumerGroup: group, Credentials: creds},
		rmq.WithAwaitDuration(awaitDuration),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatalf("NewSimpleConsumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatalf("consumer.Start: %v", err)
	}
	defer consumer.GracefulStop()
	// Receives and acknowledges until `want` messages came (or the test's time ran out).
	receive := func(want int) []string {
		var got []string
		for len(got) < want && ctx.Err() == nil {
			views, err := consumer.Receive(ctx, 16, 30*time.Second)
			if err != nil {
				if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
					continue
				}
				t.Fatalf("Receive: %v", err)
			}
			for _, view := range views {
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
	if first := receive(count); !reflect.DeepEqual(first, indexes(0, count)) {
		t.Fatalf("the first pass received %v", first)
	}
	admin("reset-offset-by-time", "-g", group, "-t", topic, "-s", fmt.Sprint(sixthAfter), "--yes")
	replay := receive(count - resetAt)
	if !reflect.DeepEqual(replay, indexes(resetAt, count)) {
		t.Fatalf("after the reset to %d the consumer received %v", resetAt, replay)
	}
	t.Logf("reset to %d: the Go SimpleConsumer received %v again, in order", resetAt, replay)
}
