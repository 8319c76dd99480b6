// Command faultclient is a plain rocketmq-clients Go v5 (gRPC) producer and simple consumer that
// Tidemark's fault harness (tests/chaos) runs as an application while it breaks the cluster,
// reporting every operation as a history on stdout, one line each, times in Unix microseconds:
//
//	ready
//	send <body> <invoked>
//	sent <body> ok|unknown <completed>
//	deliver <at> <topic> <broker> <queueId> <queueOffset> <visibleUntil> <body>
//	change <body> ok|unknown <invoked> <completed> <visibleUntil>
//	ack <body> ok|unknown <invoked> <completed> <visibleUntil>
//	stopped-sending
//
// The topic, broker, queue and offset of a delivery, and when it becomes visible again, are read
// from its receipt handle (the broker's POP receipt). The consumer acknowledges most of what it
// receives, extends one in ten by -longer first and leaves one in twenty to come back. Stdin
// accepts "stop-sending"; its EOF (or SIGINT/SIGTERM) stops both clients and exits 0.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	callTimeout  = 5 * time.Second
	failurePause = 50 * time.Millisecond
)

// events serialises stdout: the harness parses whole lines.
type events struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (e *events) emit(fields ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.WriteString(strings.Join(fields, " ") + "\n")
	e.w.Flush()
}

func micros() string { return strconv.FormatInt(time.Now().UnixMicro(), 10) }

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "faultclient: "+format+"\n", args...)
	os.Exit(2)
}

// ackStatusKey carries, in an Ack's context, where the interceptor puts the answer's status: the
// client's Ack returns nil whatever the status (v5.1.2).
type ackStatusKey struct{}

func ackStatus(ctx context.Context, method string, req, reply interface{}, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if into, ok := ctx.Value(ackStatusKey{}).(*v2.Code); ok && err == nil {
		if answer, ok := reply.(*v2.AckMessageResponse); ok {
			*into = answer.GetStatus().GetCode()
		}
	}
	return err
}

// plaintext makes every connection of the client plaintext with the status interceptor: the
// client ignores connection options given in its config (v5.1.2), so its hook is replaced.
func plaintext() {
	original := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		dial := rmq.WithDialOptions(
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(ackStatus))
		return original(target, append(opts, rmq.WithRpcClientConnOption(dial))...)
	}
}

// receipt is what the harness needs from a receipt handle (`startOffset popTime invisibleTime
// reviveQid source broker queueId queueOffset [commitLogOffset]`).
type receipt struct {
	topic, broker, queue, offset string
	visibleUntil                 int64 // Unix microseconds
}

func parseReceipt(handle, topic, group string) (receipt, bool) {
	f := strings.Split(handle, " ")
	if len(f) < 8 {
		return receipt{}, false
	}
	popTime, err1 := strconv.ParseInt(f[1], 10, 64)
	invisible, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return receipt{}, false
	}
	switch f[4] {
	case "1":
		topic = "%RETRY%" + group + "_" + topic
	case "2":
		topic = "%RETRY%" + group + "+" + topic
	}
	return receipt{topic, f[5], f[6], f[7], (popTime + invisible) * 1000}, true
}

func outcome(ok bool) string {
	if ok {
		return "ok"
	}
	return "unknown"
}

func main() {
	endpoints := flag.String("endpoints", "", "gRPC endpoints host:port[;host:port...] (required)")
	topic := flag.String("topic", "FaultTopic", "topic to send to and consume from")
	group := flag.String("group", "fault-grpc", "simple consumer group")
	prefix := flag.String("prefix", "r-", "what every body starts with")
	interval := flag.Duration("interval", 20*time.Millisecond, "pause between sends")
	invisible := flag.Duration("invisible", 10*time.Second, "invisibility of a receive")
	longer := flag.Duration("longer", 5*time.Second, "invisibility a change asks for")
	logDir := flag.String("log-dir", os.TempDir(), "directory for the Go client's own logs")
	flag.Parse()
	if *endpoints == "" {
		fail("-endpoints is required")
	}
	os.Setenv("rocketmq.client.logRoot", *logDir)
	if os.Getenv("rocketmq.client.logLevel") == "" {
		os.Setenv("rocketmq.client.logLevel", "warn")
	}
	rmq.ResetLogger()
	plaintext()

	out := &events{w: bufio.NewWriter(os.Stdout)}
	// Empty credentials: the cluster runs without ACL (the client needs them to sign).
	config := &rmq.Config{Endpoint: *endpoints, ConsumerGroup: *group,
		Credentials: &credentials.SessionCredentials{}}
	producer, err := rmq.NewProducer(config, rmq.WithTopics(*topic))
	if err != nil {
		fail("new producer: %v", err)
	}
	if err := producer.Start(); err != nil {
		fail("start producer: %v", err)
	}
	consumer, err := rmq.NewSimpleConsumer(config, rmq.WithAwaitDuration(2*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{*topic: rmq.SUB_ALL}))
	if err != nil {
		fail("new simple consumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		fail("start simple consumer: %v", err)
	}
	out.emit("ready")

	var stopSending, stopping atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; !stopSending.Load() && !stopping.Load(); i++ {
			body := *prefix + strconv.Itoa(i)
			out.emit("send", body, micros())
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := producer.Send(ctx, &rmq.Message{Topic: *topic, Body: []byte(body)})
			cancel()
			out.emit("sent", body, outcome(err == nil), micros())
			if err != nil {
				time.Sleep(failurePause)
			}
			time.Sleep(*interval)
		}
		out.emit("stopped-sending")
	}()
	go func() {
		defer wg.Done()
		consume(consumer, out, *topic, *group, *invisible, *longer, &stopping)
	}()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
	}()
	for running := true; running; {
		select {
		case <-signals:
			running = false
		case line, open := <-lines:
			if !open {
				running = false
			} else if line == "stop-sending" {
				stopSending.Store(true)
			}
		}
	}
	stopping.Store(true)
	wg.Wait()
	producer.GracefulStop()
	consumer.GracefulStop()
}

// consume receives until stopping, reporting every delivery and how it was settled.
func consume(consumer rmq.SimpleConsumer, out *events, topic, group string,
	invisible, longer time.Duration, stopping *atomic.Bool) {
	turn := 0
	for !stopping.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*callTimeout)
		views, err := consumer.Receive(ctx, 16, invisible)
		cancel()
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		// The whole batch was handed out when Receive returned, however long settling the
		// first ones takes: a delivery reported later could look handed out after a commit
		// the broker made meanwhile (its floor passes messages whose invisibility ended).
		received := micros()
		type delivered struct {
			view *rmq.MessageView
			r    receipt
		}
		batch := make([]delivered, 0, len(views))
		for _, view := range views {
			r, ok := parseReceipt(view.GetReceiptHandle(), topic, group)
			if !ok {
				continue
			}
			out.emit("deliver", received, r.topic, r.broker, r.queue, r.offset,
				strconv.FormatInt(r.visibleUntil, 10), string(view.GetBody()))
			batch = append(batch, delivered{view, r})
		}
		for _, one := range batch {
			view, r := one.view, one.r
			body := string(view.GetBody())
			turn++
			if turn%20 == 0 {
				continue // left to come back once its invisibility ends
			}
			if turn%10 == 5 {
				r = change(consumer, out, view, r, topic, group, longer)
			}
			invoked := micros()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			code := v2.Code_CODE_UNSPECIFIED
			err := consumer.Ack(context.WithValue(ctx, ackStatusKey{}, &code), view)
			cancel()
			out.emit("ack", body, outcome(err == nil && code == v2.Code_OK), invoked, micros(),
				strconv.FormatInt(r.visibleUntil, 10))
		}
	}
}

// change extends a message's invisibility. When the change fails, the client (v5.1.2) has
// replaced the view's handle with the failed answer's (empty); a careful application keeps the
// one it had, and so does this one.
func change(consumer rmq.SimpleConsumer, out *events, view *rmq.MessageView, r receipt,
	topic, group string, longer time.Duration) receipt {
	invoked := micros()
	before := view.ReceiptHandle
	err := consumer.ChangeInvisibleDuration(view, longer)
	if err != nil {
		view.ReceiptHandle = before
	} else if changed, ok := parseReceipt(view.GetReceiptHandle(), topic, group); ok {
		r = changed
	}
	out.emit("change", string(view.GetBody()), outcome(err == nil), invoked, micros(),
		strconv.FormatInt(r.visibleUntil, 10))
	return r
}
