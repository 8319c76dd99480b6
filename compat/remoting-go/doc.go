// Package remotinggo is a cross-language check of Tidemark's RocketMQ 4.x remoting protocol
// with Apache's official Go client, github.com/apache/rocketmq-client-go/v2, against a
// `tidemark dev` the tests start themselves (TIDEMARK_BIN). Everything is in the tests.
package remotinggo
