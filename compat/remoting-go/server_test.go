package remotinggo

import (
	"bufio"
	"context"
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

// server is a `tidemark dev` process started by a test from TIDEMARK_BIN.
type server struct {
	bin     string
	cmd     *exec.Cmd
	dir     string // temporary: data, log, ACL file; removed by stop
	logPath string
	exited  chan struct{}
	namesrv string // host:port from the ready line
	broker  string
}

const (
	readyWait = 30 * time.Second // from start to the `tidemark dev ready` line
	stopGrace = 10 * time.Second // from SIGTERM to exit, then SIGKILL
	cliWait   = 30 * time.Second // one `tidemark admin` command
)

// tidemarkBin returns TIDEMARK_BIN, failing the test (never skipping it) when it is unset.
func tidemarkBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("TIDEMARK_BIN")
	if bin == "" {
		t.Fatal("TIDEMARK_BIN is not set: set it to the tidemark binary (e.g. " +
			"TIDEMARK_BIN=$PWD/target/debug/tidemark from the repository root); the test starts `tidemark dev` itself")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("TIDEMARK_BIN=%s: %v", bin, err)
	}
	return bin
}

// startDev starts `tidemark dev` on free ports with a fresh data directory; files maps names
// to contents written into that directory first, and args may name them as "{dir}/name".
// The server is stopped, and its directory removed, when the test ends.
func startDev(t *testing.T, files map[string]string, args ...string) *server {
	t.Helper()
	bin := tidemarkBin(t)
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ { // a port picked as free may be taken meanwhile
		s, err := tryStart(t, bin, files, args...)
		if err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("server log tail:\n%s", s.logTail(40))
				}
				t.Logf("server stop: %s", s.stop())
			})
			return s
		}
		lastErr = err
		t.Logf("starting tidemark dev failed (attempt %d): %v", attempt, err)
	}
	t.Fatalf("could not start %s dev: %v", bin, lastErr)
	return nil
}

func tryStart(t *testing.T, bin string, files map[string]string, extra ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "tidemark-remoting-go-")
	if err != nil {
		return nil, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	namesrvPort, brokerPort, err := freePorts()
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
	args := []string{"dev",
		"--data-dir", filepath.Join(dir, "data"),
		"--namesrv-port", fmt.Sprint(namesrvPort),
		"--broker-port", fmt.Sprint(brokerPort),
		"--grpc-port", "0",
		"--http-port", "0"}
	for _, arg := range extra {
		args = append(args, strings.ReplaceAll(arg, "{dir}", dir))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{bin: bin, cmd: cmd, dir: dir, logPath: logPath, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	deadline := time.Now().Add(readyWait)
	for time.Now().Before(deadline) {
		if fields := s.readyFields(); fields != nil {
			s.namesrv, s.broker = fields["namesrv"], fields["broker"]
			if s.namesrv == "" || s.broker == "" {
				tail := s.logTail(5)
				s.stop()
				return nil, fmt.Errorf("ready line without namesrv= and broker=:\n%s", tail)
			}
			t.Logf("tidemark dev ready: namesrv=%s broker=%s (pid %d, dir %s)", s.namesrv, s.broker,
				cmd.Process.Pid, dir)
			return s, nil
		}
		select {
		case <-s.exited:
			tail := s.logTail(20)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("tidemark exited before it was ready (%v):\n%s", cmd.ProcessState, tail)
		case <-time.After(100 * time.Millisecond): // polling the log file, bounded by deadline
		}
	}
	tail := s.logTail(20)
	s.stop()
	return nil, fmt.Errorf("tidemark was not ready within %v:\n%s", readyWait, tail)
}

// readyFields returns the key=value fields of the `tidemark dev ready` line, once printed.
func (s *server) readyFields() map[string]string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "tidemark dev ready ") {
			continue
		}
		fields := map[string]string{}
		for _, field := range strings.Fields(line) {
			if k, v, ok := strings.Cut(field, "="); ok {
				fields[k] = v
			}
		}
		return fields
	}
	return nil
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

// stop sends SIGTERM, waits up to stopGrace, then kills; it removes the server's directory
// and says what happened.
func (s *server) stop() string {
	outcome := "had already exited: " + fmt.Sprint(s.cmd.ProcessState)
	select {
	case <-s.exited:
	default:
		start := time.Now()
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			outcome = fmt.Sprintf("exited %v after SIGTERM in %v", s.cmd.ProcessState,
				time.Since(start).Round(time.Millisecond))
		case <-time.After(stopGrace):
			s.cmd.Process.Kill()
			<-s.exited
			outcome = fmt.Sprintf("still running %v after SIGTERM; killed", stopGrace)
		}
	}
	os.RemoveAll(s.dir)
	return outcome
}

// admin runs `tidemark admin <command> -n <namesrv> <args...>` signed as the given account,
// bounded by cliWait, and returns its combined output and error.
func (s *server) admin(accessKey, secretKey, command string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	full := append([]string{"admin", command, "-n", s.namesrv,
		"--access-key", accessKey, "--secret-key", secretKey}, args...)
	out, err := exec.CommandContext(ctx, s.bin, full...).CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("tidemark admin %s did not finish within %v: %w", command, cliWait, ctx.Err())
	}
	return string(out), err
}

// freePorts picks a name server port and a broker port p whose p-2, p-1 and p+1 are free too
// (the broker also serves p-2, its VIP channel), all distinct.
func freePorts() (namesrv, broker int, err error) {
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
	for i := 0; i < 50; i++ {
		var p int
		if p, err = pick(); err != nil {
			return
		}
		if p < 1026 || p > 65534 || taken[p-2] || taken[p-1] || taken[p+1] {
			continue
		}
		if portFree(p-2) && portFree(p-1) && portFree(p+1) && portFree(p) {
			return namesrv, p, nil
		}
	}
	return 0, 0, fmt.Errorf("no free broker port block")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
