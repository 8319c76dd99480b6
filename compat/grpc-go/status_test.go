package grpcgo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// TestGoSimpleConsumerShowsInConsumerStatusAndTheConsole: the Go client's SimpleConsumer holds
// two of three messages it received (one acknowledged). `tidemark admin consumer-status`
// (mqadmin's consumerStatus request, which a gRPC client cannot answer itself: the gateway
// answers for it) reports the two in flight, its receive and acknowledge rates and its kind;
// the web console's group page shows the same client with the two held.
func TestGoSimpleConsumerShowsInConsumerStatusAndTheConsole(t *testing.T) {
	bin := os.Getenv("TIDEMARK_BIN")
	if bin == "" {
		t.Skip("set TIDEMARK_BIN: the test asks `tidemark admin` and the console about the consumer")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a free port: %v", err)
	}
	httpPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	endpoint, srv := grpcEndpoint(t, "--http-port", strconv.Itoa(httpPort))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() && srv != nil {
			t.Logf("server log tail:\n%s", srv.logTail(40))
		}
	})
	admin := func(args ...string) []byte {
		t.Helper()
		full := append([]string{"admin"}, args...)
		full = append(full, "-n", srv.namesrv)
		out, err := exec.Command(bin, full...).Output()
		if err != nil {
			stderr := ""
			if exit, ok := err.(*exec.ExitError); ok {
				stderr = string(exit.Stderr)
			}
			t.Fatalf("tidemark %v: %v\n%s%s", full, err, out, stderr)
		}
		return out
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-status-" + suffix
	group := "go-status-group-" + suffix
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
	for i := 0; i < 3; i++ {
		msg := &rmq.Message{Topic: topic, Body: []byte(strconv.Itoa(i))}
		if _, err := producer.Send(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	consumer, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: plaintext, ConsumerGroup: group, Credentials: creds},
		rmq.WithAwaitDuration(5*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatalf("NewSimpleConsumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatalf("consumer.Start: %v", err)
	}
	defer consumer.GracefulStop()
	var held []*rmq.MessageView
	for len(held) < 3 && ctx.Err() == nil {
		views, err := consumer.Receive(ctx, 16, 60*time.Second)
		if err != nil {
			if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
				continue
			}
			t.Fatalf("Receive: %v", err)
		}
		held = append(held, views...)
	}
	if len(held) != 3 {
		t.Fatalf("received %d of 3", len(held))
	}
	if err := consumer.Ack(ctx, held[0]); err != nil {
		t.Fatalf("ack: %v", err)
	}

	var clients []struct {
		ClientID   string            `json:"clientId"`
		Properties map[string]string `json:"properties"`
		PopQueues  []struct {
			Topic        string `json:"topic"`
			WaitAckCount int    `json:"waitAckCount"`
		} `json:"popQueues"`
		Rates []struct {
			Topic        string  `json:"topic"`
			PullTPS      float64 `json:"pullTPS"`
			ConsumeOKTPS float64 `json:"consumeOKTPS"`
		} `json:"rates"`
	}
	out := admin("consumer-status", "-g", group, "--json")
	if err := json.Unmarshal(out, &clients); err != nil {
		t.Fatalf("consumer-status JSON: %v\n%s", err, out)
	}
	if len(clients) != 1 {
		t.Fatalf("one client expected: %s", out)
	}
	client := clients[0]
	waiting := 0
	for _, queue := range client.PopQueues {
		if queue.Topic != topic {
			t.Errorf("a queue of %q held: %s", queue.Topic, out)
		}
		waiting += queue.WaitAckCount
	}
	if waiting != 2 {
		t.Errorf("%d in flight, not 2: %s", waiting, out)
	}
	if client.Properties["clientType"] != "SIMPLE_CONSUMER" || client.Properties["protocol"] != "grpc" {
		t.Errorf("kind: %v", client.Properties)
	}
	if len(client.Rates) != 1 || client.Rates[0].PullTPS <= 0 || client.Rates[0].ConsumeOKTPS <= 0 {
		t.Errorf("rates: %s", out)
	}

	page, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/groups/%s", httpPort, group))
	if err != nil {
		t.Fatalf("group page: %v", err)
	}
	defer page.Body.Close()
	body, _ := io.ReadAll(page.Body)
	html := string(body)
	row := fmt.Sprintf(`<a href="#client-%s">%s</a>`, client.ClientID, client.ClientID)
	if page.StatusCode != 200 || !strings.Contains(html, `id="clients"`) || !strings.Contains(html, row) ||
		!strings.Contains(html, "gRPC simple consumer") {
		t.Fatalf("the group page shows no client view for %s (%d):\n%s", client.ClientID, page.StatusCode, html)
	}
	// The summary row: one queue held, two messages.
	at := strings.Index(html, row)
	rest := html[at:]
	if end := strings.Index(rest, "</tr>"); end < 0 || !strings.Contains(rest[:end], `<td class="n">1</td><td class="n">2</td>`) {
		t.Errorf("the row does not show 1 queue and 2 messages held: %s", rest)
	}
	t.Logf("consumer-status and the console show %s holding %d", client.ClientID, waiting)
}
