package remotinggo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const aclFile = `globalWhiteRemoteAddresses: []
accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - orders=PUB|SUB
      - audit=DENY
    groupPerms:
      - billing=SUB
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
`

const batchSize = 5

// clientLog is where the Go client's own log goes (by default it writes to stderr).
var clientLog string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidemark-remoting-go-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	clientLog = filepath.Join(dir, "rocketmq-client.log")
	rlog.SetOutputPath(clientLog)
	if os.Getenv("ROCKETMQ_GO_LOG_LEVEL") == "" {
		rlog.SetLogLevel("warn")
	}
	code := m.Run()
	if code != 0 || os.Getenv("TIDEMARK_KEEP_LOGS") != "" {
		fmt.Fprintf(os.Stderr, "Go client log kept in %s\n", clientLog)
	} else {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// sendTrace is what the client's send path did with one SendSync call, seen from an interceptor.
type sendTrace struct {
	batch      bool   // the message on the wire is a batch: SEND_BATCH_MESSAGE (320), header V2 (topic in `b`)
	brokerAddr string // where the client sent it; "" if it never got that far (no route)
}

// TestGoBatchSendToDeniedTopic: the Go v2 client's SendSync with several messages sends one
// SEND_BATCH_MESSAGE (320, the short-form header with the topic in field `b`). An account
// allowed to publish to `orders` gets SEND_OK for such a batch; the same account's batch to
// `audit` (DENY) and to a topic it has no permission for (default DENY) is refused by the
// broker's ACL check; afterwards `audit` holds nothing, the fresh topic does not exist and
// `orders` holds the batch.
func TestGoBatchSendToDeniedTopic(t *testing.T) {
	s := startDev(t, map[string]string{"plain_acl.yml": aclFile},
		"--acl-file", "{dir}/plain_acl.yml", "--acl-access-key", "admin-key", "--acl-secret-key", "admin-secret")
	asAdmin := func(command string, args ...string) (string, error) {
		return s.admin("admin-key", "admin-secret", command, args...)
	}
	for _, topic := range []string{"orders", "audit"} {
		if out, err := asAdmin("topic-create", "-b", s.broker, "-t", topic, "--json"); err != nil {
			t.Fatalf("admin topic-create %s: %v\n%s", topic, err, out)
		}
	}

	var (
		traceMu sync.Mutex
		traces  = map[string]sendTrace{} // by topic, the last SendSync's
	)
	record := func(ctx context.Context, req, reply interface{}, next primitive.Invoker) error {
		err := next(ctx, req, reply)
		msg, ok := req.(*primitive.Message)
		if !ok {
			return err
		}
		trace := sendTrace{batch: msg.Batch}
		if pc, ok := primitive.GetProducerCtx(ctx); ok {
			trace.brokerAddr = pc.BrokerAddr
		}
		traceMu.Lock()
		traces[msg.Topic] = trace
		traceMu.Unlock()
		return err
	}
	traceOf := func(topic string) sendTrace {
		traceMu.Lock()
		defer traceMu.Unlock()
		return traces[topic]
	}

	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	p, err := rocketmq.NewProducer(
		producer.WithNameServer(primitive.NamesrvAddr{s.namesrv}),
		producer.WithCredentials(primitive.Credentials{AccessKey: "alice-key", SecretKey: "alice-secret"}),
		producer.WithRetry(0),
		producer.WithGroupName("remoting-go-batch"),
		producer.WithInstanceName("remoting-go-"+suffix),
		producer.WithSendMsgTimeout(5*time.Second),
		producer.WithInterceptor(record),
	)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(); err != nil {
			t.Logf("producer Shutdown: %v", err)
		}
	}) // runs before the server's stop (cleanups run last-registered first)

	sendBatch := func(topic string) (*primitive.SendResult, error) {
		msgs := make([]*primitive.Message, batchSize)
		for i := range msgs {
			msgs[i] = primitive.NewMessage(topic, []byte(fmt.Sprintf("remoting-go %s %d", topic, i)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return p.SendSync(ctx, msgs...)
	}

	// 1. The allowed topic: a batch of five is accepted.
	result, err := sendBatch("orders")
	if err != nil {
		t.Fatalf("alice's batch to orders: %v", err)
	}
	if result.Status != primitive.SendOK {
		t.Fatalf("alice's batch to orders: status %v, want SEND_OK (%v)", result.Status, result)
	}
	if tr := traceOf("orders"); !tr.batch || tr.brokerAddr == "" {
		t.Fatalf("the batch to orders was not sent as one batch to a broker: %+v", tr)
	}
	t.Logf("1. orders: SEND_OK, one batch of %d to %s, queue %d offset %d", batchSize,
		traceOf("orders").brokerAddr, result.MessageQueue.QueueId, result.QueueOffset)

	// 2. The denied topic and 3. a fresh topic (default DENY): refused. Both routes are
	// answered (the name server does not check topic permissions; the fresh topic gets the
	// default topic's route), so both batches reach the broker and its ACL check refuses them.
	fresh := "remoting-go-fresh-" + suffix
	for i, topic := range []string{"audit", fresh} {
		result, err := sendBatch(topic)
		if err == nil {
			t.Fatalf("alice's batch to %s was accepted (%v), want a refusal", topic, result)
		}
		tr := traceOf(topic)
		if !tr.batch {
			t.Fatalf("the send to %s was not a batch: %+v", topic, tr)
		}
		if tr.brokerAddr == "" {
			t.Fatalf("the batch to %s never reached a broker (refused before it: %v), so the broker's "+
				"ACL check of SEND_BATCH_MESSAGE is not exercised", topic, err)
		}
		// RocketMQ's answer: NO_PERMISSION (16) with PlainPermissionManager's text, which says
		// "No default permission" for an explicit DENY too.
		want := "CODE: 16, DESC: No default permission for topic:" + topic
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("alice's batch to %s: want a refusal containing %q, got %v", topic, want, err)
		}
		t.Logf("%d. %s: refused by %s: %v", i+2, topic, tr.brokerAddr, err)
	}

	// 4. As admin: audit holds nothing, orders holds the batch, the fresh topic does not exist.
	for topic, want := range map[string]int64{"audit": 0, "orders": batchSize} {
		out, err := asAdmin("topic-status", "-t", topic)
		if err != nil {
			t.Fatalf("admin topic-status %s: %v\n%s", topic, err, out)
		}
		queues, stored, perr := storedMessages(out)
		if perr != nil || queues == 0 {
			t.Fatalf("admin topic-status %s: %v (%d queues)\n%s", topic, perr, queues, out)
		}
		if stored != want {
			t.Fatalf("topic %s holds %d messages, want %d\n%s", topic, stored, want, out)
		}
		t.Logf("4. %s holds %d messages in %d queues", topic, stored, queues)
	}
	if out, err := asAdmin("topic-route", "-t", "orders", "--json"); err != nil {
		t.Fatalf("admin topic-route orders (the control): %v\n%s", err, out)
	}
	out, err := asAdmin("topic-route", "-t", fresh, "--json")
	if err == nil {
		t.Fatalf("topic %s has a route, want none:\n%s", fresh, out)
	}
	if !strings.Contains(out, "no route") {
		t.Fatalf("admin topic-route %s failed otherwise than with no route: %v\n%s", fresh, err, out)
	}
	t.Logf("4. topic-route %s: %s", fresh, strings.TrimSpace(out))
	out, err = asAdmin("topic-list", "--json")
	if err != nil {
		t.Fatalf("admin topic-list: %v\n%s", err, out)
	}
	var listed []struct {
		Topic string `json:"topic"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &listed); err != nil {
		t.Fatalf("admin topic-list --json: %v\n%s", err, out)
	}
	names := map[string]bool{}
	for _, entry := range listed {
		names[entry.Topic] = true
	}
	if !names["orders"] || !names["audit"] || names[fresh] {
		t.Fatalf("topic-list: want orders and audit and not %s, got %s", fresh, out)
	}
	t.Logf("4. topic-list: %d topics, orders and audit, not %s", len(listed), fresh)
}

// storedMessages sums max - min offset over the rows of `tidemark admin topic-status`'s table
// (`#Broker #QID #Min Offset #Max Offset`) and says how many queue rows it read.
func storedMessages(table string) (queues int, stored int64, err error) {
	header := false
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && fields[0] == "#Broker" {
			header = true
			continue
		}
		if !header || len(fields) != 4 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // not a queue row (e.g. "broker-a answered by ...")
		}
		minOffset, err1 := strconv.ParseInt(fields[2], 10, 64)
		maxOffset, err2 := strconv.ParseInt(fields[3], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("queue row %q: offsets are not numbers", line)
		}
		queues++
		stored += maxOffset - minOffset
	}
	if !header {
		return 0, 0, fmt.Errorf("no #Broker header")
	}
	return queues, stored, nil
}
