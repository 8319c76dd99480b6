package grpcgo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

// TestGoSimpleConsumerShowsInConsumerStatusAndTheConsole: the Go client's SimpleConsumer holds
// two of three messages it received (one acknowledged). `tidemark admin consumer-status`
// (mqadmin's consumerStatus request, which a gRPC client cannot answer itself: the gateway
// answers for it) reports the two in flight, its receive and acknowledge rates and its kind;
// the web console's group page shows the same client with the two held.
func TestGoSimpleConsumerShowsInConsumerStatusAndTheConsole(t *testing.T) {
	app := startDevApp(t, "the test asks `tidemark admin` and the console about the consumer", true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-status-" + suffix
	group := "go-status-group-" + suffix
	app.admin("topic-create", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1")
	producer := app.producer(topic)
	for i := 0; i < 3; i++ {
		msg := &rmq.Message{Topic: topic, Body: []byte(strconv.Itoa(i))}
		if _, err := producer.Send(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	consumer := app.simpleConsumer(group, topic, 5*time.Second)
	var held []*rmq.MessageView
	for len(held) < 3 && ctx.Err() == nil {
		held = append(held, receive(ctx, t, consumer, 16, 60*time.Second)...)
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
	out := app.admin("consumer-status", "-g", group, "--json")
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

	page, err := http.Get(fmt.Sprintf("http://%s/groups/%s", app.srv.http, group))
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
