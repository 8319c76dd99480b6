package grpcgo

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// devApp is a `tidemark dev` started by one test, with what the tests that also drive
// `tidemark admin` need: the binary, the server, and its gRPC address over plaintext.
type devApp struct {
	t         *testing.T
	bin       string
	srv       *server
	plaintext string
	creds     *credentials.SessionCredentials
}

// startDevApp starts the server (with the console's HTTP port when withHTTP), or skips the
// test, saying why it needs TIDEMARK_BIN, when that is not set.
func startDevApp(t *testing.T, why string, withHTTP bool) *devApp {
	t.Helper()
	bin := os.Getenv("TIDEMARK_BIN")
	if bin == "" {
		t.Skip("set TIDEMARK_BIN: " + why)
	}
	endpoint, srv := launch(t, withHTTP)
	t.Cleanup(func() {
		if t.Failed() && srv != nil {
			t.Logf("server log tail:\n%s", srv.logTail(40))
		}
	})
	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("gRPC address %q: %v", endpoint, err)
	}
	return &devApp{t: t, bin: bin, srv: srv, plaintext: net.JoinHostPort(plaintextHost, port),
		creds: &credentials.SessionCredentials{}}
}

// admin runs `tidemark admin <args> -n <name server>` and returns its standard output; the
// test fails, with what the command printed, when it does.
func (d *devApp) admin(args ...string) []byte {
	d.t.Helper()
	full := append([]string{"admin"}, args...)
	full = append(full, "-n", d.srv.namesrv)
	out, err := exec.Command(d.bin, full...).Output()
	if err != nil {
		stderr := ""
		if exit, ok := err.(*exec.ExitError); ok {
			stderr = string(exit.Stderr)
		}
		d.t.Fatalf("tidemark %v: %v\n%s%s", full, err, out, stderr)
	}
	return out
}

// producer is a started producer of topic, stopped when the test ends.
func (d *devApp) producer(topic string) rmq.Producer {
	d.t.Helper()
	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: d.plaintext, Credentials: d.creds},
		rmq.WithTopics(topic))
	if err != nil {
		d.t.Fatalf("NewProducer: %v", err)
	}
	if err := producer.Start(); err != nil {
		d.t.Fatalf("producer.Start: %v", err)
	}
	d.t.Cleanup(func() { producer.GracefulStop() })
	return producer
}

// simpleConsumer is a started SimpleConsumer of group on every message of topic, stopped when
// the test ends.
func (d *devApp) simpleConsumer(group, topic string, await time.Duration) rmq.SimpleConsumer {
	d.t.Helper()
	consumer, err := rmq.NewSimpleConsumer(
		&rmq.Config{Endpoint: d.plaintext, ConsumerGroup: group, Credentials: d.creds},
		rmq.WithAwaitDuration(await),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		d.t.Fatalf("NewSimpleConsumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		d.t.Fatalf("consumer.Start: %v", err)
	}
	d.t.Cleanup(func() { consumer.GracefulStop() })
	return consumer
}

// receive is one Receive of up to max messages; a long poll that found nothing is an empty
// answer, any other error fails the test.
func receive(ctx context.Context, t *testing.T, consumer rmq.SimpleConsumer, max int32,
	invisible time.Duration) []*rmq.MessageView {
	t.Helper()
	views, err := consumer.Receive(ctx, max, invisible)
	if err != nil {
		if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
			return nil
		}
		t.Fatalf("Receive: %v", err)
	}
	return views
}
