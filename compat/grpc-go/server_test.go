package grpcgo

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// server is a `tidemark dev` process started by the test (TIDEMARK_BIN), or nil when the
// test talks to an already running server (TIDEMARK_GRPC_ADDR).
type server struct {
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{}
	grpc    string
	namesrv string // the name server's address, for `tidemark admin`
	http    string // the console's address (127.0.0.1:port), when the test asked for it
	stuck   string // the log tail when SIGTERM did not stop the server
}

const stopGrace = 10 * time.Second

// grpcEndpoint returns the gRPC address to test against: a server this test starts from
// TIDEMARK_BIN (preferred), else TIDEMARK_GRPC_ADDR; it skips the test when neither is set.
func grpcEndpoint(t *testing.T, extra ...string) (string, *server) {
	t.Helper()
	return launch(t, false, extra...)
}

// launch is grpcEndpoint that also serves the console when withHTTP: its port is chosen with
// the others, so that a port taken meanwhile is retried like theirs.
func launch(t *testing.T, withHTTP bool, extra ...string) (string, *server) {
	t.Helper()
	if bin := os.Getenv("TIDEMARK_BIN"); bin != "" {
		var lastErr error
		for attempt := 0; attempt < 3; attempt++ {
			s, err := startServer(t, bin, withHTTP, extra...)
			if err == nil {
				t.Cleanup(func() { reportStop(t, s) })
				return s.grpc, s
			}
			lastErr = err
			t.Logf("starting tidemark failed (attempt %d): %v", attempt+1, err)
		}
		t.Fatalf("could not start %s: %v", bin, lastErr)
	}
	if addr := os.Getenv("TIDEMARK_GRPC_ADDR"); addr != "" {
		return addr, nil
	}
	t.Skip("set TIDEMARK_BIN (path to the tidemark binary; the test starts `tidemark dev` itself) " +
		"or TIDEMARK_GRPC_ADDR (host:port of a running server's gRPC port) to run this check")
	return "", nil
}

func startServer(t *testing.T, bin string, withHTTP bool, extra ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "tidemark-grpc-go-")
	if err != nil {
		return nil, err
	}
	namesrv, broker, grpcPort, httpPort, err := freePorts()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := append([]string{"dev",
		"--data-dir", filepath.Join(dir, "data"),
		"--namesrv-port", fmt.Sprint(namesrv),
		"--broker-port", fmt.Sprint(broker),
		"--grpc-port", fmt.Sprint(grpcPort)}, extra...)
	if withHTTP {
		args = append(args, "--http-port", fmt.Sprint(httpPort))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, logPath: logPath, exited: make(chan struct{}),
		namesrv: fmt.Sprintf("127.0.0.1:%d", namesrv)}
	if withHTTP {
		s.http = fmt.Sprintf("127.0.0.1:%d", httpPort)
	}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if addr := s.readyGrpc(); addr != "" {
			s.grpc = addr
			t.Logf("tidemark dev ready: grpc=%s (pid %d, data %s)", addr, cmd.Process.Pid, dir)
			return s, nil
		}
		select {
		case <-s.exited:
			tail := s.logTail(20)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("tidemark exited before it was ready (%v):\n%s", cmd.ProcessState, tail)
		case <-time.After(100 * time.Millisecond):
		}
	}
	tail := s.logTail(20)
	s.stop()
	return nil, fmt.Errorf("tidemark was not ready within 30 s:\n%s", tail)
}

// reportStop stops the server and prints how it went. A server that ignores SIGTERM (it is
// killed after stopGrace) is a warning, or a failure with TIDEMARK_STRICT_STOP=1.
func reportStop(t *testing.T, s *server) {
	outcome := s.stop()
	fmt.Printf("grpc-go: server stop: %s\n", outcome)
	if s.stuck != "" {
		msg := fmt.Sprintf("tidemark did not exit within %v of SIGTERM (the Go clients had been "+
			"stopped, but v5.1.2's GracefulStop leaves their Telemetry streams open); server log tail:\n%s",
			stopGrace, s.stuck)
		if os.Getenv("TIDEMARK_STRICT_STOP") != "" {
			t.Error(msg)
		} else {
			fmt.Printf("grpc-go: WARNING: %s\n", msg)
		}
	}
}

// readyGrpc returns the grpc= address of the `tidemark dev ready` line, once printed.
func (s *server) readyGrpc() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "tidemark dev ready") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if strings.HasPrefix(field, "grpc=") {
				return strings.TrimPrefix(field, "grpc=")
			}
		}
	}
	return ""
}

func (s *server) logTail(n int) string {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop sends SIGTERM, waits up to 10 s, then kills; it removes the data directory and
// returns what happened.
func (s *server) stop() string {
	outcome := "had already exited: " + fmt.Sprint(s.cmd.ProcessState)
	select {
	case <-s.exited:
	default:
		start := time.Now()
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			outcome = fmt.Sprintf("exited %v after SIGTERM in %v", s.cmd.ProcessState, time.Since(start).Round(time.Millisecond))
		case <-time.After(stopGrace):
			s.stuck = s.logTail(6)
			s.cmd.Process.Kill()
			<-s.exited
			outcome = fmt.Sprintf("still running %v after SIGTERM; killed", stopGrace)
		}
	}
	os.RemoveAll(s.dir)
	return outcome
}

// freePorts picks a name server port, a broker port p whose p-2, p-1 and p+1 are free too,
// a gRPC port and an HTTP port, all distinct.
func freePorts() (namesrv, broker, grpcPort, httpPort int, err error) {
	taken := map[int]bool{}
	pick := func() (int, error) {
		for i := 0; i < 50; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			if !taken[port] {
				taken[port] = true
				return port, nil
			}
		}
		return 0, fmt.Errorf("no free port")
	}
	if namesrv, err = pick(); err != nil {
		return
	}
	if grpcPort, err = pick(); err != nil {
		return
	}
	if httpPort, err = pick(); err != nil {
		return
	}
	for i := 0; i < 50; i++ {
		var p int
		if p, err = pick(); err != nil {
			return
		}
		if p < 1026 || p > 65534 || taken[p-2] || taken[p-1] || taken[p+1] {
			continue
		}
		if portFree(p-2) && portFree(p-1) && portFree(p+1) && portFree(p) {
			return namesrv, p, grpcPort, httpPort, nil
		}
	}
	return 0, 0, 0, 0, fmt.Errorf("no free broker port block")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
