// Command faultclient is a plain rocketmq-client-go v2 producer and push consumer that a Rust
// fault-injection test drives over stdin/stdout, so the test sees Tidemark through the eyes of
// an ordinary Go application while it breaks things underneath.
//
// Stdout carries one event per line: "ready", "acked <body> <offsetMsgId>",
// "delivered <queueId> <body>" and "stopped-sending". Stdin accepts "stop-sending"; its EOF
// (or SIGINT/SIGTERM) shuts both clients down and exits 0.
//
// With -history the send and delivery lines are a history instead, every time in Unix
// microseconds: "send <body> <invoked>" before a send, "sent <body> ok|unknown <completed>
// <broker> <queueId> <queueOffset>" after it (broker "-" and -1s when it failed), and
// "deliver <at> <broker> <queueId> <queueOffset> <body>". Bodies are -prefix and a number.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// failurePause is added after a failed send so that a broker that is down is not hammered.
const failurePause = 50 * time.Millisecond

// events serialises stdout: the consumer callback runs on many goroutines, and the test parses
// whole lines, so a line must never interleave with another or linger in a buffer.
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

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port[;host:port...] (required)")
	topic := flag.String("topic", "FaultTopic", "topic to send to and consume from")
	group := flag.String("group", "fault-consumer", "consumer group")
	producerGroup := flag.String("producer-group", "fault-producer", "producer group")
	intervalMs := flag.Int("interval-ms", 20, "pause between sends, ms")
	history := flag.Bool("history", false, "report sends and deliveries as a timed history")
	prefix := flag.String("prefix", "go-", "what every body starts with")
	logPath := flag.String("log", filepath.Join(os.TempDir(),
		fmt.Sprintf("tidemark-faultclient-%d.log", os.Getpid())), "file for the Go client's own log")
	flag.Parse()
	if *namesrv == "" {
		fail("-namesrv is required")
	}

	// The client logs chattily; stdout is reserved for the event protocol.
	if err := rlog.SetOutputPath(*logPath); err != nil {
		fail("client log %s: %v", *logPath, err)
	}
	if os.Getenv("ROCKETMQ_GO_LOG_LEVEL") == "" {
		rlog.SetLogLevel("warn")
	}

	out := &events{w: bufio.NewWriter(os.Stdout)}
	resolver := primitive.NewPassthroughResolver(strings.Split(*namesrv, ";"))

	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName(*group),
		consumer.WithNsResolver(resolver),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		fail("new consumer: %v", err)
	}
	err = c.Subscribe(*topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				queueID, broker := -1, "-"
				if m.Queue != nil {
					queueID, broker = m.Queue.QueueId, m.Queue.BrokerName
				}
				if *history {
					out.emit("deliver", micros(), broker, strconv.Itoa(queueID),
						strconv.FormatInt(m.QueueOffset, 10), string(m.Body))
				} else {
					out.emit("delivered", strconv.Itoa(queueID), string(m.Body))
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		fail("subscribe %s: %v", *topic, err)
	}
	if err := c.Start(); err != nil {
		fail("start consumer: %v", err)
	}

	p, err := rocketmq.NewProducer(
		producer.WithGroupName(*producerGroup),
		producer.WithNsResolver(resolver),
		// The test counts what the broker acknowledged; a client-side retry would blur
		// which attempt a fault hit.
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(3*time.Second),
	)
	if err != nil {
		c.Shutdown()
		fail("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		c.Shutdown()
		fail("start producer: %v", err)
	}
	out.emit("ready")

	stop := make(chan struct{})
	var stopOnce sync.Once
	stopSending := func() { stopOnce.Do(func() { close(stop) }) }
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		sendLoop(p, *topic, *prefix, *history, time.Duration(*intervalMs)*time.Millisecond, stop, out)
	}()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go func() {
		// Blocking here while the current send finishes keeps "stopped-sending" a promise
		// that no further "acked" line follows.
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			if strings.TrimSpace(scanner.Text()) == "stop-sending" {
				stopSending()
				<-sent
				out.emit("stopped-sending")
			}
		}
		cancel()
	}()
	<-ctx.Done()

	// No send may be in flight when the producer goes away, or its outcome would be unreported.
	stopSending()
	<-sent
	if err := p.Shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "faultclient: producer shutdown: %v\n", err)
	}
	if err := c.Shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "faultclient: consumer shutdown: %v\n", err)
	}
}

// micros is the time now in Unix microseconds, as the history reports it.
func micros() string {
	return strconv.FormatInt(time.Now().UnixMicro(), 10)
}

// sendLoop sends <prefix>0, <prefix>1, ... one at a time until stop is closed. Every attempt
// uses up a number, so a gap in the acked bodies shows exactly which sends failed.
func sendLoop(p rocketmq.Producer, topic, prefix string, history bool, interval time.Duration,
	stop <-chan struct{}, out *events) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		body := prefix + strconv.Itoa(n)
		pause := interval
		if history {
			out.emit("send", body, micros())
		}
		res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
		if history {
			outcome, broker, queue, offset := "unknown", "-", "-1", "-1"
			if err == nil && res.Status == primitive.SendOK {
				outcome = "ok"
				if res.MessageQueue != nil {
					broker, queue = res.MessageQueue.BrokerName, strconv.Itoa(res.MessageQueue.QueueId)
				}
				offset = strconv.FormatInt(res.QueueOffset, 10)
			}
			out.emit("sent", body, outcome, micros(), broker, queue, offset)
		}
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "faultclient: send %s: %v\n", body, err)
			pause += failurePause
		case res.Status != primitive.SendOK:
			fmt.Fprintf(os.Stderr, "faultclient: send %s: status %d\n", body, res.Status)
			pause += failurePause
		case !history:
			out.emit("acked", body, res.OffsetMsgID)
		}
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "faultclient: "+format+"\n", args...)
	os.Exit(1)
}
