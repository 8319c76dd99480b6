package grpcgo

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

const aclRules = `accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - go-acl-ok=PUB|SUB
      - go-acl-denied=DENY
    groupPerms:
      - go-acl-group=SUB
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
`

// TestGoAcl: the Go client signs its calls (`Credential=<key>//Rocketmq`, lower-case hex), and
// `tidemark dev --acl-file` checks them: an allowed account sends and receives; a denied topic
// and a wrong secret are refused with RocketMQ's texts.
func TestGoAcl(t *testing.T) {
	if os.Getenv("TIDEMARK_BIN") == "" {
		t.Skip("set TIDEMARK_BIN: the test starts `tidemark dev --acl-file` itself")
	}
	file := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(file, []byte(aclRules), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint, srv := grpcEndpoint(t, "--acl-file", file, "--acl-access-key", "admin-key",
		"--acl-secret-key", "admin-secret")
	t.Cleanup(func() {
		if t.Failed() && srv != nil {
			t.Logf("server log tail:\n%s", srv.logTail(40))
		}
	})
	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("gRPC address %q: %v", endpoint, err)
	}
	plaintext := net.JoinHostPort(plaintextHost, port)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := &credentials.SessionCredentials{AccessKey: "alice-key", AccessSecret: "alice-secret"}

	// send returns the first error of starting a producer of topic and sending one message.
	send := func(creds *credentials.SessionCredentials, topic string) error {
		producer, err := rmq.NewProducer(&rmq.Config{Endpoint: plaintext, Credentials: creds},
			rmq.WithTopics(topic))
		if err != nil {
			return err
		}
		if err := producer.Start(); err != nil {
			return err
		}
		defer producer.GracefulStop()
		_, err = producer.Send(ctx, &rmq.Message{Topic: topic, Body: []byte("go-acl")})
		return err
	}

	if err := send(alice, "go-acl-ok"); err != nil {
		t.Fatalf("alice's send to go-acl-ok: %v", err)
	}
	consumer, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: plaintext, ConsumerGroup: "go-acl-group", Credentials: alice},
		rmq.WithAwaitDuration(awaitDuration),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{"go-acl-ok": rmq.SUB_ALL}))
	if err != nil {
		t.Fatalf("NewSimpleConsumer: %v", err)
	}
	if err := consumer.Start(); err != nil {
		t.Fatalf("consumer.Start: %v", err)
	}
	defer consumer.GracefulStop()
	received := 0
	for deadline := time.Now().Add(30 * time.Second); received == 0 && time.Now().Before(deadline); {
		views, err := consumer.Receive(ctx, 16, 20*time.Second)
		if err != nil {
			continue
		}
		for _, view := range views {
			if err := consumer.Ack(ctx, view); err != nil {
				t.Fatalf("ack: %v", err)
			}
			received++
		}
	}
	if received == 0 {
		t.Fatalf("alice's SimpleConsumer in go-acl-group received nothing")
	}
	t.Logf("allowed: alice send and receive go-acl-ok as go-acl-group")

	for _, refused := range []struct {
		creds  *credentials.SessionCredentials
		topic  string
		reason string
	}{
		{alice, "go-acl-denied", "No default permission for topic:go-acl-denied"},
		{&credentials.SessionCredentials{AccessKey: "alice-key", AccessSecret: "wrong-secret"}, "go-acl-ok",
			"Check signature failed for accessKey=alice-key"},
		{&credentials.SessionCredentials{}, "go-acl-ok", "No accessKey is configured"},
	} {
		err := send(refused.creds, refused.topic)
		if err == nil || !strings.Contains(err.Error(), refused.reason) {
			t.Fatalf("%s → %s: want a refusal containing %q, got %v", refused.creds.AccessKey, refused.topic,
				refused.reason, err)
		}
		t.Logf("refused: %q → %s: %s", refused.creds.AccessKey, refused.topic, refused.reason)
	}
}
