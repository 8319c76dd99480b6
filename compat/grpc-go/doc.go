// Package grpcgo is a cross-language check of Tidemark's RocketMQ 5 gRPC service
// (apache.rocketmq.v2.MessagingService) with the official Go client,
// github.com/apache/rocketmq-clients/golang/v5. Everything is in the tests; see README.md.
package grpcgo
