#!/usr/bin/env python3
"""Cross-language check: Tidemark's RocketMQ 5 gRPC service against the official
Python client (rocketmq-python-client 5.1.2).

Starts `$TIDEMARK_BIN dev` on free ports with a temporary data directory, then:
  * a Producer sends 10 normal messages (tag, keys, user property) and 1 FIFO
    message (message group);
  * a SimpleConsumer (subscription "*") receives and acks each exactly once,
    checking body, tag, keys, properties, message group and delivery attempt 1;
  * one more message is received with a 2 s invisible duration and NOT acked; it
    must come back (>= 2 s later) with delivery attempt 2, and is acked then;
  * after the acked messages' invisibility has run out, nothing comes back;
  * FIFO: an orderly group receives three message groups' messages in order, exactly
    once, and nothing of a group while it holds that group's earlier message unacked.
Prints `grpc-python: sent=N received=N redelivered=1 fifo=9 ok` and exits 0 on success;
exits 1 with the problems on failure, 2 when TIDEMARK_BIN is unset. The server is
always stopped (SIGTERM, SIGKILL after 10 s) and its temp directory removed.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

READY_TIMEOUT = 30.0
STOP_GRACE = 10.0
RUN_BUDGET = 75.0  # seconds for the client part; the whole run stays < 90 s


def log(msg):
    print(f"grpc-python: {msg}", flush=True)


# ---------------------------------------------------------------- server ----

def _port_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _pick(taken):
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
    raise RuntimeError("no free port")


def free_ports():
    """A name server port, a broker port p with p-2, p-1, p+1 free too, a gRPC port."""
    taken = set()
    namesrv = _pick(taken)
    grpc_port = _pick(taken)
    for _ in range(50):
        p = _pick(taken)
        if p < 1026 or p > 65534 or {p - 2, p - 1, p + 1} & taken:
            continue
        if all(_port_free(q) for q in (p - 2, p - 1, p, p + 1)):
            return namesrv, p, grpc_port
    raise RuntimeError("no free broker port block")


START_ATTEMPTS = 5
ADDRESS_IN_USE = "Address already in use"


class PortTaken(Exception):
    """The server exited before it was ready because a port it was given was in use."""


class Server:
    def __init__(self, binary, extra=()):
        self.binary = binary
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="tidemark-grpc-python-")
        self.log_path = os.path.join(self.dir, "server.log")
        self.proc = None
        self.grpc = None

    def start(self):
        # The ports were free when picked; another process (a test running beside this one) may
        # take one before the server binds it. Then the server exits saying so: try fresh ports.
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start_once()
            except PortTaken:
                log(f"a port was taken before tidemark bound it (attempt {attempt}); fresh ports")
        raise RuntimeError(f"tidemark found a port taken on {START_ATTEMPTS} starts:\n" + self.tail(20))

    def _start_once(self):
        namesrv, broker, grpc_port = free_ports()
        self.namesrv = f"127.0.0.1:{namesrv}"
        self._log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "dev",
             "--data-dir", os.path.join(self.dir, "data"),
             "--namesrv-port", str(namesrv),
             "--broker-port", str(broker),
             "--grpc-port", str(grpc_port)] + self.extra,
            stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            addr = self._ready_grpc()
            if addr:
                self.grpc = addr
                log(f"tidemark dev ready: grpc={addr} (pid {self.proc.pid}, data {self.dir})")
                return
            if self.proc.poll() is not None:
                if ADDRESS_IN_USE in self.tail(20):
                    self._log_file.close()
                    raise PortTaken()
                raise RuntimeError(f"tidemark exited ({self.proc.returncode}) before it was ready:\n"
                                   + self.tail(20))
            time.sleep(0.1)
        raise RuntimeError("tidemark was not ready within 30 s:\n" + self.tail(20))

    def _ready_grpc(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                for line in f:
                    if line.startswith("tidemark dev ready"):
                        for field in line.split():
                            if field.startswith("grpc="):
                                return field[len("grpc="):]
        except OSError:
            pass
        return None

    def tail(self, n):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError as e:
            return f"(no server log: {e})"

    def stop(self):
        outcome = "not started"
        if self.proc is not None:
            if self.proc.poll() is not None:
                outcome = f"had already exited ({self.proc.returncode})"
            else:
                start = time.monotonic()
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_GRACE)
                    outcome = (f"exited ({self.proc.returncode}) after SIGTERM in "
                               f"{time.monotonic() - start:.3f}s")
                except subprocess.TimeoutExpired:
                    outcome = (f"WARNING: still running {STOP_GRACE:.0f}s after SIGTERM; killed; log tail:\n"
                               + self.tail(6))
                    self.proc.kill()
                    self.proc.wait()
            self._log_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return outcome


# ---------------------------------------------------------------- check -----

class Expect:
    def __init__(self, body, tag, keys, props, group=None):
        self.body, self.tag, self.keys, self.props, self.group = body, tag, set(keys), props, group


def shutdown_all(clients):
    """Shuts the started clients down, last first; a failure is logged, not raised."""
    for c in reversed(clients):
        try:
            c.shutdown()
        except Exception as ex:
            log(f"WARNING: {type(c).__name__}.shutdown raised {type(ex).__name__}: {ex}")


def run_check(endpoint, problems):
    # The client's log config runs at import time and writes ~/logs/rocketmq_python/;
    # HOME has been pointed at a temp dir before this import (see main()).
    from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message,
                          Producer, SimpleConsumer)

    deadline = time.monotonic() + RUN_BUDGET

    def fail(msg):
        problems.append(msg)
        log("PROBLEM: " + msg)

    suffix = uuid.uuid4().hex[:8]
    topic = f"py-compat-{suffix}"
    group = f"py-compat-group-{suffix}"
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)

    producer = Producer(config, (topic,))
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=3)
    stats = {"sent": 0, "received": 0, "redelivered": 0}
    started = []
    try:
        producer.startup()
        started.append(producer)
        consumer.startup()
        started.append(consumer)

        expects = {}

        def send(e):
            m = Message()
            m.topic = topic
            m.body = e.body.encode()
            m.tag = e.tag
            for k in sorted(e.keys):  # the setter adds one key per assignment
                m.keys = k
            for k, v in e.props.items():
                m.add_property(k, v)
            if e.group:
                m.message_group = e.group
            receipt = producer.send(m)
            if not getattr(receipt, "message_id", None):
                fail(f"{e.body}: send receipt without message id: {receipt}")
            expects[e.body] = e
            stats["sent"] += 1

        # ---- send: 10 normal + 1 FIFO ----
        for i in range(10):
            send(Expect(f"normal-{i}", "TagA", [f"key-{i}", "py-key"], {"idx": str(i)}))
        send(Expect("fifo-0", "TagF", ["fifo-key"], {"kind": "fifo"}, group="py-group-1"))
        log(f"sent {stats['sent']} messages to {topic}")

        def verify(m, e, attempt):
            if m.topic != topic:
                fail(f"{e.body}: topic {m.topic!r}, want {topic!r}")
            if m.tag != e.tag:
                fail(f"{e.body}: tag {m.tag!r}, want {e.tag!r}")
            if set(m.keys) != e.keys:
                fail(f"{e.body}: keys {sorted(m.keys)}, want {sorted(e.keys)}")
            if dict(m.properties) != e.props:
                fail(f"{e.body}: user properties {dict(m.properties)}, want {e.props}")
            if (m.message_group or None) != e.group:
                fail(f"{e.body}: message group {m.message_group!r}, want {e.group!r}")
            if m.delivery_attempt != attempt:
                fail(f"{e.body}: delivery attempt {m.delivery_attempt}, want {attempt}")
            if not m.receipt_handle:
                fail(f"{e.body}: no receipt handle")
            if m.corrupted:
                fail(f"{e.body}: body checksum mismatch (corrupted)")

        def receive(max_num, invisible):
            try:
                return consumer.receive(max_num, invisible) or []
            except Exception as ex:  # the client raises on a non-OK/NOT_FOUND answer
                if "MESSAGE_NOT_FOUND" in str(ex) or "NOT_FOUND" in type(ex).__name__.upper():
                    return []
                fail(f"receive raised {type(ex).__name__}: {ex}")
                return []

        # ---- phase 1: receive + ack each of the 11 exactly once ----
        phase1_invisible = 5
        acked = {}
        while len(acked) < len(expects) and time.monotonic() < deadline - 30:
            for m in receive(16, phase1_invisible):
                body = m.body.decode(errors="replace") if isinstance(m.body, bytes) else str(m.body)
                e = expects.get(body)
                if e is None:
                    fail(f"unexpected message {body!r}")
                    continue
                if body in acked:
                    fail(f"{body}: received again after it was acked (attempt {m.delivery_attempt})")
                    continue
                verify(m, e, 1)
                try:
                    consumer.ack(m)
                except Exception as ex:
                    fail(f"{body}: ack raised {type(ex).__name__}: {ex}")
                acked[body] = time.monotonic()
                stats["received"] += 1
        missing = sorted(set(expects) - set(acked))
        if missing:
            fail(f"phase 1: never received {missing}")
        log(f"phase 1: received and acked {len(acked)}/{len(expects)}")

        # ---- phase 2: received, not acked, back after 2 s with attempt 2 ----
        probe = Expect("probe-0", "TagP", ["probe-key"], {"kind": "probe"})
        send(probe)
        first = None
        while first is None and time.monotonic() < deadline - 20:
            for m in receive(1, 2):
                body = m.body.decode(errors="replace")
                if body != probe.body:
                    fail(f"phase 2: unexpected message {body!r} (attempt {m.delivery_attempt})")
                    continue
                verify(m, probe, 1)
                first = time.monotonic()
                stats["received"] += 1
        if first is None:
            fail("phase 2: probe-0 was never received")
        else:
            back = None
            while back is None and time.monotonic() < deadline - 8:
                for m in receive(1, 10):
                    body = m.body.decode(errors="replace")
                    if body != probe.body:
                        fail(f"phase 2: unexpected message {body!r} (attempt {m.delivery_attempt})")
                        continue
                    back = time.monotonic() - first
                    verify(m, probe, 2)
                    if back < 1.5:  # invisible 2 s; allow for clock granularity
                        fail(f"phase 2: probe-0 came back after {back:.2f}s, before its 2 s invisibility")
                    try:
                        consumer.ack(m)
                    except Exception as ex:
                        fail(f"probe-0: ack after redelivery raised {type(ex).__name__}: {ex}")
                    stats["redelivered"] += 1
            if back is None:
                fail("phase 2: probe-0 (not acked, invisible 2 s) never came back")
            else:
                log(f"phase 2: probe-0 came back after {back:.2f}s with attempt 2 and was acked")

        # ---- phase 3: after the acked receipts' invisibility ran out, nothing comes back ----
        if acked:
            wait = max(acked.values()) + phase1_invisible + 0.5 - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        for m in receive(16, 10):
            fail(f"phase 3: acked message {m.body!r} came back (attempt {m.delivery_attempt})")
        log("phase 3: nothing came back")
    finally:
        shutdown_all(started)
    return stats


def run_fifo_check(endpoint, binary, namesrv, problems):
    """FIFO: a SimpleConsumer of an orderly group (made so with `tidemark admin group-create
    --orderly`, as mqadmin 5.x sets it) receives each message group's messages in send order,
    exactly once, and never a message of a group whose earlier message it holds unacknowledged.
    Returns the number of messages checked."""
    from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message,
                          Producer, SimpleConsumer)

    def fail(msg):
        problems.append("fifo: " + msg)
        log("PROBLEM: fifo: " + msg)

    suffix = uuid.uuid4().hex[:8]
    topic = f"py-fifo-{suffix}"
    group = f"py-fifo-group-{suffix}"
    made = subprocess.run([binary, "admin", "group-create", "-n", namesrv, "-c", "DefaultCluster",
                           "-g", group, "--orderly"], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        fail(f"tidemark admin group-create --orderly failed: {made.stdout}{made.stderr}")
        return 0
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=3)
    groups = ["order-a", "order-b", "order-c"]
    per_group = 3
    problems_before = len(problems)
    started = []
    received_total = 0
    try:
        producer.startup()
        started.append(producer)
        for i in range(per_group):
            for g in groups:
                m = Message()
                m.topic = topic
                m.body = f"{g}/{i}".encode()
                m.tag = "TagF"
                m.message_group = g
                producer.send(m)
        consumer.startup()
        started.append(consumer)

        def receive():
            # Two at a time: more of a group than one receive takes, so holding them must
            # block the rest of that group.
            try:
                return consumer.receive(2, 20) or []
            except Exception as ex:
                if "MESSAGE_NOT_FOUND" in str(ex) or "NOT_FOUND" in type(ex).__name__.upper():
                    return []
                fail(f"receive raised {type(ex).__name__}: {ex}")
                return []

        next_index = {g: 0 for g in groups}
        held = set()
        pending = []

        def take(messages):
            for m in messages:
                g = m.message_group or ""
                want = f"{g}/{next_index.get(g, 0)}"
                got = m.body.decode(errors="replace")
                if got != want:
                    fail(f"group {g!r}: received {got!r}, want {want!r} (out of order or repeated)")
                    return False
                next_index[g] = next_index.get(g, 0) + 1
                held.add(g)
                pending.append(m)
            return True

        rounds = 0
        deadline = time.monotonic() + 60
        while sum(next_index.values()) < per_group * len(groups):
            rounds += 1
            if time.monotonic() > deadline or rounds > 60:
                fail(f"received {next_index} of {per_group} per group after {rounds} rounds")
                break
            if not take(receive()):
                break
            if not pending:
                continue
            # Holding those unacknowledged (checked in the first rounds; each check waits out a
            # long poll): whatever else arrives must be of other groups.
            more = receive() if rounds <= 3 else []
            for m in more:
                if (m.message_group or "") in held:
                    fail(f"received {m.body!r} while an earlier message of group "
                         f"{m.message_group!r} was unacknowledged")
            if len(problems) > problems_before or not take(more):
                break
            for m in pending:
                consumer.ack(m)
            received_total += len(pending)
            pending.clear()
            held.clear()
        again = receive()
        if again:
            fail(f"received {len(again)} messages again after all were acknowledged "
                 f"(first {again[0].body!r})")
        log(f"fifo: {received_total} messages in {len(groups)} groups received in order, "
            f"exactly once, in {rounds} rounds")
    finally:
        shutdown_all(started)
    return received_total


ACL_RULES = """\
accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - py-acl-ok=PUB|SUB
      - py-acl-denied=DENY
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""


def run_acl_check(endpoint, problems, client_log):
    """The Python client signs with Credentials(ak, sk) (lower-case hex, and an empty Credential
    when it has none): an allowed send, then a denied topic, a wrong secret and no credentials,
    each refused with RocketMQ's text. The client raises "failed to fetch topic ... route" and
    logs the server's code and text (e.g. "40100, No accessKey is configured"): the text is
    looked for in what the attempt added to its log."""

    def log_size():
        try:
            return os.path.getsize(client_log)
        except OSError:
            return 0

    def logged_since(offset):
        try:
            with open(client_log, errors="replace") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return ""

    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    def attempt(credentials, topic):
        producer = Producer(ClientConfiguration(endpoint, credentials, request_timeout=5), (topic,))
        try:
            producer.startup()
            m = Message()
            m.topic = topic
            m.body = b"py-acl"
            producer.send(m)
            return None
        except Exception as ex:  # the client raises its own exception types
            return f"{type(ex).__name__}: {ex}"
        finally:
            try:
                producer.shutdown()
            except Exception:
                pass

    refused = attempt(Credentials("alice-key", "alice-secret"), "py-acl-ok")
    if refused:
        problems.append(f"acl: alice's send to py-acl-ok was refused: {refused}")
    else:
        log("acl: alice send py-acl-ok: allowed")
    for credentials, topic, reason in [
        (Credentials("alice-key", "alice-secret"), "py-acl-denied", "No default permission for topic:py-acl-denied"),
        (Credentials("alice-key", "wrong-secret"), "py-acl-ok", "Check signature failed for accessKey=alice-key"),
        (Credentials(), "py-acl-ok", "No accessKey is configured"),
    ]:
        before = log_size()
        outcome = attempt(credentials, topic)
        if outcome is None:
            problems.append(f"acl: {topic}: expected a refusal with {reason!r}, the send succeeded")
        elif reason not in outcome and reason not in logged_since(before):
            problems.append(f"acl: {topic}: expected a refusal with {reason!r}, got {outcome!r} "
                            "and the client log does not name it")
        else:
            log(f"acl: {topic}: refused: {reason}")


def main():
    binary = os.environ.get("TIDEMARK_BIN")
    if not binary:
        print("grpc-python: TIDEMARK_BIN is not set; set it to the tidemark binary "
              "(e.g. TIDEMARK_BIN=$PWD/target/debug/tidemark); the check starts `tidemark dev` itself",
              file=sys.stderr)
        return 2
    if not os.access(binary, os.X_OK):
        print(f"grpc-python: TIDEMARK_BIN={binary} is not an executable file", file=sys.stderr)
        return 2

    # The client writes ~/logs/rocketmq_python/rocketmq_client.log: send it to a temp dir.
    log_home = tempfile.mkdtemp(prefix="tidemark-grpc-python-logs-")
    os.environ["HOME"] = log_home
    client_log = os.path.join(log_home, "logs", "rocketmq_python", "rocketmq_client.log")

    start = time.monotonic()
    problems = []
    stats = None
    server = Server(binary)
    # Hard bound for the whole run: a hung client call must not hang the check.
    servers = [server]
    watchdog = threading.Timer(150.0, lambda: (log("FAIL: run exceeded 150 s; stopping the servers"),
                                                [log("server stop: " + s.stop()) for s in servers],
                                                os._exit(1)))
    watchdog.daemon = True
    watchdog.start()
    try:
        server.start()
        stats = run_check(server.grpc, problems)
        stats["fifo"] = run_fifo_check(server.grpc, binary, server.namesrv, problems)
    except Exception as ex:
        problems.append(f"{type(ex).__name__}: {ex}")
        log(f"FAIL: {type(ex).__name__}: {ex}")
    finally:
        server_tail = server.tail(30)
        log("server stop: " + server.stop())
    # The same client against `tidemark dev --acl-file`.
    acl_file = os.path.join(tempfile.mkdtemp(prefix="tidemark-grpc-python-acl-"), "plain_acl.yml")
    with open(acl_file, "w") as f:
        f.write(ACL_RULES)
    acl_server = Server(binary, ["--acl-file", acl_file, "--acl-access-key", "admin-key",
                                 "--acl-secret-key", "admin-secret"])
    servers.append(acl_server)
    try:
        acl_server.start()
        run_acl_check(acl_server.grpc, problems, client_log)
    except Exception as ex:
        problems.append(f"acl: {type(ex).__name__}: {ex}")
        log(f"FAIL: acl: {type(ex).__name__}: {ex}")
    finally:
        if problems:
            server_tail += "\n--- ACL server ---\n" + acl_server.tail(30)
        log("acl server stop: " + acl_server.stop())
        shutil.rmtree(os.path.dirname(acl_file), ignore_errors=True)
        watchdog.cancel()

    elapsed = time.monotonic() - start
    if stats and not problems:
        shutil.rmtree(log_home, ignore_errors=True)
        log(f"sent={stats['sent']} received={stats['received']} "
            f"redelivered={stats['redelivered']} fifo={stats.get('fifo', 0)} ok "
            f"(elapsed {elapsed:.1f}s)")
        return 0
    if stats:
        log(f"sent={stats['sent']} received={stats['received']} redelivered={stats['redelivered']}")
    log(f"FAILED with {len(problems)} problem(s) (elapsed {elapsed:.1f}s):")
    for p in problems:
        log("  - " + p)
    log("server log tail:\n" + server_tail)
    try:
        with open(client_log, errors="replace") as f:
            log("client log tail:\n" + "".join(f.readlines()[-30:]))
    except OSError:
        pass
    log(f"client logs kept in {log_home}")
    return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # the client's non-daemon threads must not keep the process alive
