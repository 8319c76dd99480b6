package grpcgo

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/zaplog"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
)

const (
	normalCount   = 20
	awaitDuration = 3 * time.Second  // the SimpleConsumer's long-polling wait
	invisible     = 10 * time.Second // invisibility of ordinary receives
	shortInvis    = 2 * time.Second  // invisibility of the receive whose message is not acked
	delayAhead    = 2 * time.Second  // delivery timestamp of the delay message, from its send
	earlySlack    = 250 * time.Millisecond
	heldBody      = "normal-5" // received, not acked, invisibility changed to 2 s
)

// logDir receives the Go client's own log files (it would otherwise write to
// $user.home/logs/rocketmqlogs and /tmp/rocketmq-logger.log).
var logDir string

func TestMain(m *testing.M) {
	var err error
	logDir, err = os.MkdirTemp("", "tidemark-grpc-go-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv("rocketmq.client.logRoot", logDir)
	if os.Getenv("rocketmq.client.logLevel") == "" {
		os.Setenv("rocketmq.client.logLevel", "info")
	}
	rmq.ResetLogger() // the client's init() built its logger before the variables were set
	hookRpcClients()
	code := m.Run()
	if code != 0 || os.Getenv("TIDEMARK_KEEP_LOGS") != "" {
		fmt.Fprintf(os.Stderr, "Go client logs kept in %s\n", logDir)
	} else {
		os.RemoveAll(logDir)
	}
	os.Exit(code)
}

// expectation is what one sent message must look like when received.
type expectation struct {
	id        string
	body      string
	tag       string
	keys      []string
	props     map[string]string
	group     string    // FIFO message group, "" if none
	deliverAt time.Time // delay messages: not receivable before this
}

// receipt is one delivery of one message.
type receipt struct {
	at      time.Time
	attempt int32
}

// The Go client v5.1.2 ignores a client's WithConnOptions (its client manager calls
// NewRpcClient(target) with no options), so the transport is chosen here, per target, in its
// exported NewRpcClient hook: the producer dials the server as 127.0.0.1 and gets a
// plaintext dial option; the consumer dials it as localhost and keeps the client's default
// TLS (x509, InsecureSkipVerify). The hook also sends the client's per-call log to logDir.
var (
	dialsMu sync.Mutex
	dials   = map[string]string{} // target -> "plaintext" | "tls"
)

func hookRpcClients() {
	callLog := zaplog.New(zaplog.WithFileName(filepath.Join(logDir, "grpc-calls.log")))
	original := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		dialOpts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(recordStatus)}
		mode := "tls"
		if strings.HasPrefix(target, plaintextHost+":") {
			dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
			mode = "plaintext"
		}
		conn := []rmq.ConnOption{rmq.WithZapLogger(callLog), rmq.WithDialOptions(dialOpts...)}
		dialsMu.Lock()
		dials[target] = mode
		dialsMu.Unlock()
		return original(target, append(opts, rmq.WithRpcClientConnOption(conn...))...)
	}
}

// The RocketMQ status of every unary answer, by method: the client hides some of them (Ack
// returns nil whatever the status), so the test checks them here.
var (
	statusMu sync.Mutex
	statuses = map[string]map[string]int{} // method -> status code -> count
)

func recordStatus(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	code := "grpc-" + grpcstatus.Code(err).String()
	if err == nil {
		if answer, ok := reply.(interface{ GetStatus() *v2.Status }); ok {
			code = answer.GetStatus().GetCode().String()
			if code != "OK" && answer.GetStatus().GetMessage() != "" {
				code += "(" + answer.GetStatus().GetMessage() + ")"
			}
		}
	}
	name := method[strings.LastIndex(method, "/")+1:]
	statusMu.Lock()
	if statuses[name] == nil {
		statuses[name] = map[string]int{}
	}
	statuses[name][code]++
	statusMu.Unlock()
	return err
}

const (
	plaintextHost = "127.0.0.1" // the producer's endpoint host
	tlsHost       = "localhost" // the consumer's endpoint host
)

func TestGoClientAgainstTidemark(t *testing.T) {
	// The tally is per process: start it afresh, so other tests' calls are not counted here.
	statusMu.Lock()
	statuses = map[string]map[string]int{}
	statusMu.Unlock()
	endpoint, srv := grpcEndpoint(t)
	testStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 85*time.Second)
	defer cancel()

	dumpOnFailure := func() {
		if !t.Failed() {
			return
		}
		if srv != nil {
			t.Logf("server log tail:\n%s", srv.logTail(40))
		}
		if data, err := os.ReadFile(filepath.Join(logDir, "rocketmq_client_go.log")); err == nil {
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("Go client log tail:\n%s", strings.Join(lines, "\n"))
		}
	}
	t.Cleanup(dumpOnFailure) // runs after the clients stop, before the server stops

	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "go-compat-" + suffix
	group := "go-compat-group-" + suffix
	creds := &credentials.SessionCredentials{} // no ACL on `tidemark dev`: empty key and secret

	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("gRPC address %q: %v", endpoint, err)
	}
	producerEndpoint := net.JoinHostPort(plaintextHost, port)
	consumerEndpoint := net.JoinHostPort(tlsHost, port)
	if host != plaintextHost && host != tlsHost { // a remote server: dial it as given, with TLS
		t.Logf("gRPC host %s: both clients dial it with TLS", host)
		producerEndpoint, consumerEndpoint = endpoint, endpoint
	}

	// Producer: plaintext. Consumer: the client's default TLS dial (see hookRpcClients).
	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: producerEndpoint, Credentials: creds},
		rmq.WithTopics(topic))
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	if err := producer.Start(); err != nil {
		t.Fatalf("producer.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := producer.GracefulStop(); err != nil {
			t.Errorf("producer.GracefulStop: %v", err)
		}
	})

	consumer, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: consumerEndpoint, ConsumerGroup: group, Credentials: creds},
		rmq.WithAwaitDuration(awaitDuration),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatalf("NewSimpleConsumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatalf("consumer.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := consumer.GracefulStop(); err != nil {
			t.Errorf("consumer.GracefulStop: %v", err)
		}
	})

	// ---- send: 20 normal, 1 FIFO, 1 delay ----
	expected := map[string]*expectation{} // by message id
	send := func(e *expectation, msg *rmq.Message) {
		t.Helper()
		receipts, err := producer.Send(ctx, msg)
		if err != nil {
			t.Fatalf("send %s: %v", e.body, err)
		}
		if len(receipts) != 1 || receipts[0].MessageID == "" {
			t.Fatalf("send %s: want one receipt with a message id, got %+v", e.body, receipts)
		}
		e.id = receipts[0].MessageID
		if _, dup := expected[e.id]; dup {
			t.Fatalf("send %s: message id %s returned twice", e.body, e.id)
		}
		expected[e.id] = e
	}
	newMessage := func(e *expectation) *rmq.Message {
		msg := &rmq.Message{Topic: topic, Body: []byte(e.body)}
		msg.SetTag(e.tag)
		msg.SetKeys(e.keys...)
		for k, v := range e.props {
			msg.AddProperty(k, v)
		}
		return msg
	}
	for i := 0; i < normalCount; i++ {
		e := &expectation{
			body:  fmt.Sprintf("normal-%d", i),
			tag:   "TagA",
			keys:  []string{fmt.Sprintf("key-%d", i), fmt.Sprintf("order-%d", i)},
			props: map[string]string{"idx": strconv.Itoa(i), "lang": "go"},
		}
		send(e, newMessage(e))
	}
	fifo := &expectation{body: "fifo-0", tag: "TagF", keys: []string{"fifo-key"},
		props: map[string]string{"kind": "fifo"}, group: "go-group-1"}
	fifoMsg := newMessage(fifo)
	fifoMsg.SetMessageGroup(fifo.group)
	send(fifo, fifoMsg)

	delayed := &expectation{body: "delay-0", tag: "TagD", keys: []string{"delay-key"},
		props: map[string]string{"kind": "delay"}}
	delayed.deliverAt = time.Now().Add(delayAhead)
	delayMsg := newMessage(delayed)
	delayMsg.SetDelayTimestamp(delayed.deliverAt)
	send(delayed, delayMsg)
	sent := len(expected)

	deliveries := map[string][]receipt{} // by message id
	var problems []string
	fail := func(format string, args ...interface{}) {
		problems = append(problems, fmt.Sprintf(format, args...))
		t.Errorf(format, args...)
	}
	var lastAckedExpiry time.Time // when the invisibility of the last acked receipt ends
	noteAck := func(at time.Time, invis time.Duration) {
		if at.Add(invis).After(lastAckedExpiry) {
			lastAckedExpiry = at.Add(invis)
		}
	}
	receive := func(invis time.Duration) ([]*rmq.MessageView, time.Time) {
		t.Helper()
		views, err := consumer.Receive(ctx, 16, invis)
		at := time.Now()
		if err != nil {
			if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
				return nil, at // long poll ended empty: RocketMQ's answer is MESSAGE_NOT_FOUND
			}
			t.Fatalf("Receive(invisible=%v) after %v: %v", invis, time.Since(testStart).Round(time.Millisecond), err)
		}
		return views, at
	}
	check := func(view *rmq.MessageView, at time.Time) *expectation {
		e, ok := expected[view.GetMessageId()]
		if !ok {
			fail("received unknown message id=%s body=%q", view.GetMessageId(), view.GetBody())
			return nil
		}
		if got := string(view.GetBody()); got != e.body {
			fail("%s: body %q", e.body, got)
		}
		if view.GetTopic() != topic {
			fail("%s: topic %q, want %q", e.body, view.GetTopic(), topic)
		}
		if view.GetTag() == nil || *view.GetTag() != e.tag {
			fail("%s: tag %v, want %q", e.body, strPtr(view.GetTag()), e.tag)
		}
		if got := sorted(view.GetKeys()); !reflect.DeepEqual(got, sorted(e.keys)) {
			fail("%s: keys %v, want %v", e.body, got, e.keys)
		}
		if got := view.GetProperties(); !reflect.DeepEqual(got, e.props) {
			fail("%s: user properties %v, want %v", e.body, got, e.props)
		}
		if e.group != "" && (view.GetMessageGroup() == nil || *view.GetMessageGroup() != e.group) {
			fail("%s: message group %v, want %q", e.body, strPtr(view.GetMessageGroup()), e.group)
		}
		if e.group == "" && view.GetMessageGroup() != nil {
			fail("%s: unexpected message group %q", e.body, *view.GetMessageGroup())
		}
		if view.GetBornTimestamp() == nil {
			fail("%s: no born timestamp", e.body)
		}
		if view.GetReceiptHandle() == "" {
			fail("%s: no receipt handle", e.body)
		}
		if !e.deliverAt.IsZero() {
			if at.Before(e.deliverAt.Add(-earlySlack)) {
				fail("%s: received %v before its delivery time", e.body, e.deliverAt.Sub(at))
			}
			dt := view.GetDeliveryTimestamp()
			if dt == nil || dt.UnixMilli() != e.deliverAt.UnixMilli() {
				fail("%s: delivery timestamp %v, want %v", e.body, dt, e.deliverAt)
			}
		}
		deliveries[e.id] = append(deliveries[e.id], receipt{at: at, attempt: view.GetDeliveryAttempt()})
		return e
	}
	ack := func(view *rmq.MessageView, e *expectation, at time.Time, invis time.Duration) {
		if err := consumer.Ack(ctx, view); err != nil {
			fail("ack %s: %v", e.body, err)
		}
		noteAck(at, invis)
	}

	// ---- phase 1: receive (invisible 10 s) and ack all 22; one is held and comes back ----
	acked := map[string]bool{}
	var heldAt time.Time
	phase1End := time.Now().Add(30 * time.Second)
	for len(acked) < sent && time.Now().Before(phase1End) {
		views, at := receive(invisible)
		for _, view := range views {
			e := check(view, at)
			if e == nil {
				continue
			}
			ds := deliveries[e.id]
			switch {
			case len(ds) == 1 && e.body == heldBody:
				if view.GetDeliveryAttempt() != 1 {
					fail("%s: first delivery attempt %d, want 1", e.body, view.GetDeliveryAttempt())
				}
				// Not acked: its invisibility is shortened to 2 s, so it must come back.
				if err := consumer.ChangeInvisibleDuration(view, shortInvis); err != nil {
					fail("ChangeInvisibleDuration(%s, %v): %v", e.body, shortInvis, err)
				}
				heldAt = time.Now()
			case len(ds) == 1:
				if view.GetDeliveryAttempt() != 1 {
					fail("%s: first delivery attempt %d, want 1", e.body, view.GetDeliveryAttempt())
				}
				ack(view, e, at, invisible)
				acked[e.id] = true
			case len(ds) == 2 && e.body == heldBody:
				if view.GetDeliveryAttempt() != 2 {
					fail("%s: redelivery attempt %d, want 2", e.body, view.GetDeliveryAttempt())
				}
				if back := at.Sub(heldAt); back < shortInvis-earlySlack {
					fail("%s: came back %v after its invisibility was set to %v", e.body, back, shortInvis)
				}
				ack(view, e, at, invisible)
				acked[e.id] = true
			default:
				fail("%s: delivered %d times (attempts %v)", e.body, len(ds), attempts(ds))
			}
		}
	}
	if len(acked) < sent {
		var missing []string
		for id, e := range expected {
			if !acked[id] {
				missing = append(missing, fmt.Sprintf("%s(deliveries=%v)", e.body, attempts(deliveries[id])))
			}
		}
		sort.Strings(missing)
		t.Fatalf("phase 1: acked %d of %d within 30 s; missing %v", len(acked), sent, missing)
	}
	t.Logf("phase 1 done after %v: %d messages received and acked, %s redelivered via ChangeInvisibleDuration; %s received %v after its delivery time",
		time.Since(testStart).Round(time.Millisecond), len(acked), heldBody,
		delayed.body, deliveries[delayed.id][0].at.Sub(delayed.deliverAt).Round(time.Millisecond))

	// ---- phase 2: a message received with invisibility 2 s and not acked comes back ----
	probe := &expectation{body: "probe-0", tag: "TagP", keys: []string{"probe-key"},
		props: map[string]string{"kind": "probe"}}
	send(probe, newMessage(probe))
	sent = len(expected)
	var firstAt time.Time
	phase2End := time.Now().Add(20 * time.Second)
	for len(deliveries[probe.id]) < 2 && time.Now().Before(phase2End) {
		invis := invisible
		if len(deliveries[probe.id]) == 0 {
			invis = shortInvis
		}
		views, at := receive(invis)
		for _, view := range views {
			e := check(view, at)
			if e == nil {
				continue
			}
			if e != probe {
				fail("phase 2: %s delivered again (attempts %v) after it was acked", e.body, attempts(deliveries[e.id]))
				continue
			}
			switch len(deliveries[e.id]) {
			case 1:
				if view.GetDeliveryAttempt() != 1 {
					fail("%s: first delivery attempt %d, want 1", e.body, view.GetDeliveryAttempt())
				}
				firstAt = at // not acked
			case 2:
				if view.GetDeliveryAttempt() != 2 {
					fail("%s: redelivery attempt %d, want 2", e.body, view.GetDeliveryAttempt())
				}
				if back := at.Sub(firstAt); back < shortInvis-earlySlack {
					fail("%s: came back %v after a receive with invisibility %v", e.body, back, shortInvis)
				}
				ack(view, e, at, invisible)
				acked[e.id] = true
			default:
				fail("%s: delivered %d times", e.body, len(deliveries[e.id]))
			}
		}
	}
	if !acked[probe.id] {
		t.Fatalf("phase 2: %s deliveries %v, want attempts [1 2] within 20 s", probe.body, attempts(deliveries[probe.id]))
	}
	t.Logf("phase 2 done after %v: %s came back after %v with attempt 2",
		time.Since(testStart).Round(time.Millisecond), probe.body,
		deliveries[probe.id][1].at.Sub(deliveries[probe.id][0].at).Round(time.Millisecond))

	// ---- phase 3: acks hold (the Go client's Ack ignores a non-OK status, so check it here):
	// nothing comes back once every acked receipt's invisibility has run out ----
	if wait := time.Until(lastAckedExpiry.Add(time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	quietUntil := time.Now().Add(awaitDuration + time.Second)
	for time.Now().Before(quietUntil) {
		views, at := receive(invisible)
		for _, view := range views {
			if e := check(view, at); e != nil {
				fail("phase 3: %s delivered again (attempts %v) after it was acked", e.body, attempts(deliveries[e.id]))
			}
		}
	}

	// ---- summary ----
	received, redelivered := 0, 0
	attemptsOK := true
	for id, e := range expected {
		ds := deliveries[id]
		if len(ds) > 0 {
			received++
		}
		if len(ds) > 1 {
			redelivered++
		}
		want := []int32{1}
		if e.body == heldBody || e == probe {
			want = []int32{1, 2}
		}
		if !reflect.DeepEqual(attempts(ds), want) {
			attemptsOK = false
			fail("%s: delivery attempts %v, want %v", e.body, attempts(ds), want)
		}
	}
	statusMu.Lock()
	var answers []string
	for method, codes := range statuses {
		for code, n := range codes {
			answers = append(answers, fmt.Sprintf("%s:%s=%d", method, code, n))
			if code != "OK" {
				fail("%d %s call(s) answered %s", n, method, code)
			}
		}
	}
	for _, method := range []string{"QueryRoute", "SendMessage", "AckMessage", "ChangeInvisibleDuration"} {
		if statuses[method]["OK"] == 0 {
			fail("no OK answer recorded for %s", method)
		}
	}
	if n := statuses["AckMessage"]["OK"]; n != sent {
		fail("AckMessage answered OK %d times, want %d (one ack per message)", n, sent)
	}
	statusMu.Unlock()
	sort.Strings(answers)

	dialsMu.Lock()
	var transports []string
	for target, mode := range dials {
		transports = append(transports, target+"="+mode)
	}
	if producerEndpoint != consumerEndpoint && (dials[producerEndpoint] != "plaintext" || dials[consumerEndpoint] != "tls") {
		fail("want %s dialled plaintext and %s dialled with TLS, got %v", producerEndpoint, consumerEndpoint, dials)
	}
	dialsMu.Unlock()
	sort.Strings(transports)
	if received != sent || redelivered != 2 {
		fail("received=%d redelivered=%d, want received=%d redelivered=2", received, redelivered, sent)
	}

	fmt.Printf("grpc-go: unary answers [%s]\n", strings.Join(answers, " "))
	fmt.Printf("grpc-go: dials [%s]\n", strings.Join(transports, " "))
	fmt.Printf("grpc-go: sent=%d received=%d redelivered=%d attempts_ok=%t problems=%d elapsed=%v\n",
		sent, received, redelivered, attemptsOK, len(problems), time.Since(testStart).Round(100*time.Millisecond))
}

func attempts(ds []receipt) []int32 {
	out := []int32{}
	for _, d := range ds {
		out = append(out, d.attempt)
	}
	return out
}

func sorted(in []string) []string {
	out := append([]string{}, in...)
	sort.Strings(out)
	return out
}

func strPtr(s *string) interface{} {
	if s == nil {
		return nil
	}
	return *s
}
