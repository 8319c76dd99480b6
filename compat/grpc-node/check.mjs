// Cross-language check: Tidemark's RocketMQ 5 gRPC service against Apache RocketMQ's official
// Node.js client (rocketmq-client-nodejs 1.0.8, from npm).
//
// Starts `$TIDEMARK_BIN dev` on free ports with a temporary data directory, then:
//   * a Producer sends 10 normal messages (tag, keys, user property) and 1 with a message group;
//   * a SimpleConsumer receives and acks each exactly once, checking body, tag, keys,
//     properties, message group and delivery attempt 1;
//   * one more is received with a 2 s invisible duration and not acked: it must come back
//     (>= 2 s later) with delivery attempt 2, and is acked then;
//   * after the acked messages' invisibility ran out, nothing comes back;
//   * FIFO: a SimpleConsumer of an orderly group (`tidemark admin group-create --orderly`)
//     receives three message groups' messages in send order, exactly once, and nothing of a
//     group while it holds that group's earlier message unacknowledged.
// Prints `grpc-node: sent=N received=N redelivered=1 fifo=9 ok` and exits 0; exits 1 with the
// problems, 2 when TIDEMARK_BIN is unset. The server is always stopped and its folder removed.

import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { format } from 'node:util';

const READY_TIMEOUT_MS = 30_000;
const STOP_GRACE_MS = 10_000;
const WATCHDOG_MS = 150_000;

const log = (msg) => console.log(`grpc-node: ${msg}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const binary = process.env.TIDEMARK_BIN;
if (!binary) {
  console.error('grpc-node: TIDEMARK_BIN is not set; set it to the tidemark binary '
    + '(e.g. TIDEMARK_BIN=$PWD/target/debug/tidemark); the check starts `tidemark dev` itself');
  process.exit(2);
}
// The client's default logger writes under $HOME/logs: keep that in a temp folder.
const logHome = fs.mkdtempSync(path.join(os.tmpdir(), 'tidemark-grpc-node-logs-'));
process.env.HOME = logHome;
const { Producer, SimpleConsumer } = await import('rocketmq-client-nodejs');
// The default logger is one shared file stream that the first client's shutdown closes; each
// client here logs to a file of its own run instead.
const clientLogPath = path.join(logHome, 'client.log');
const clientLog = Object.fromEntries(['debug', 'info', 'warn', 'error'].map((level) => [level,
  (...args) => fs.appendFileSync(clientLogPath, `${new Date().toISOString()} ${level} ${format(...args)}\n`)]));

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function portFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A name server port, a broker port p with p-2, p-1 and p+1 free too, a gRPC port. */
async function freePorts() {
  const namesrv = await freePort();
  const grpc = await freePort();
  for (let i = 0; i < 50; i++) {
    const p = await freePort();
    const taken = [namesrv, grpc];
    if (p < 1026 || p > 65534 || [p - 2, p - 1, p + 1].some((n) => taken.includes(n))) continue;
    if ((await portFree(p - 2)) && (await portFree(p - 1)) && (await portFree(p + 1))) {
      return { namesrv, broker: p, grpc };
    }
  }
  throw new Error('no free broker port block');
}

const START_ATTEMPTS = 5;
const ADDRESS_IN_USE = 'Address already in use';

class Server {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidemark-grpc-node-'));
    this.logPath = path.join(this.dir, 'server.log');
    this.proc = null;
  }

  // The ports were free when picked; another process (a test running beside this one) may take
  // one before the server binds it. Then the server exits saying so: try fresh ports.
  async start() {
    for (let attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
      if (await this.startOnce()) return;
      log(`a port was taken before tidemark bound it (attempt ${attempt}); fresh ports`);
    }
    throw new Error(`tidemark found a port taken on ${START_ATTEMPTS} starts:\n${this.tail(20)}`);
  }

  /** Starts on fresh ports: true once ready, false when a port was taken. */
  async startOnce() {
    const ports = await freePorts();
    this.namesrv = `127.0.0.1:${ports.namesrv}`;
    const out = fs.openSync(this.logPath, 'w');
    this.proc = spawn(binary, ['dev', '--data-dir', path.join(this.dir, 'data'),
      '--namesrv-port', String(ports.namesrv), '--broker-port', String(ports.broker),
      '--grpc-port', String(ports.grpc)], { stdio: ['ignore', out, out] });
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, signal) => resolve({ code, signal })));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      const line = this.tail(400).split('\n').find((l) => l.startsWith('tidemark dev ready'));
      const field = line?.split(/\s+/).find((f) => f.startsWith('grpc='));
      if (field) {
        this.grpc = field.slice('grpc='.length);
        log(`tidemark dev ready: grpc=${this.grpc} (pid ${this.proc.pid}, data ${this.dir})`);
        fs.closeSync(out);
        return true;
      }
      if (this.proc.exitCode !== null) {
        fs.closeSync(out);
        if (this.tail(20).includes(ADDRESS_IN_USE)) return false;
        throw new Error(`tidemark exited (${this.proc.exitCode}) before it was ready:\n${this.tail(20)}`);
      }
      await sleep(100);
    }
    throw new Error(`tidemark was not ready within 30 s:\n${this.tail(20)}`);
  }

  tail(n) {
    try {
      return fs.readFileSync(this.logPath, 'utf8').split('\n').slice(-n).join('\n');
    } catch (e) {
      return `(no server log: ${e.message})`;
    }
  }

  async stop() {
    if (!this.proc) return 'not started';
    let outcome;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      outcome = `had already exited (${this.proc.exitCode})`;
    } else {
      const started = Date.now();
      this.proc.kill('SIGTERM');
      const stopped = await Promise.race([this.exited, sleep(STOP_GRACE_MS).then(() => null)]);
      if (stopped) {
        outcome = `exited (${stopped.code}) after SIGTERM in ${((Date.now() - started) / 1000).toFixed(3)}s`;
      } else {
        this.proc.kill('SIGKILL');
        await this.exited;
        outcome = `WARNING: still running ${STOP_GRACE_MS / 1000}s after SIGTERM; killed`;
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
    return outcome;
  }
}

const problems = [];
const fail = (msg) => {
  problems.push(msg);
  log(`PROBLEM: ${msg}`);
};

/** Receives, treating "nothing there" as an empty answer. */
async function receive(consumer, max, invisibleMs) {
  try {
    return (await consumer.receive(max, invisibleMs)) ?? [];
  } catch (e) {
    if (/NOT_FOUND/i.test(String(e?.message ?? e)) || /NotFound/.test(e?.constructor?.name ?? '')) return [];
    fail(`receive threw ${e?.constructor?.name}: ${e?.message ?? e}`);
    return [];
  }
}

const bodyOf = (view) => view.body.toString('utf8');

/** Shuts the started clients down, last first; a failure is logged, not thrown. */
async function shutdownAll(clients) {
  for (const client of clients.reverse()) {
    try { await client.shutdown(); } catch (e) { log(`WARNING: shutdown threw ${e?.message ?? e}`); }
  }
}

async function runCheck(endpoint, stats) {
  const suffix = randomUUID().slice(0, 8);
  const topic = `node-compat-${suffix}`;
  const group = `node-compat-group-${suffix}`;
  const producer = new Producer({ endpoints: endpoint, topics: [topic], requestTimeout: 5000, logger: clientLog });
  const consumer = new SimpleConsumer({
    endpoints: endpoint, consumerGroup: group, requestTimeout: 5000, logger: clientLog,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 3000,
  });
  const started = [];
  try {
    await producer.startup();
    started.push(producer);
    await consumer.startup();
    started.push(consumer);
    const expects = new Map();
    const send = async (e) => {
      const receipt = await producer.send({
        topic, tag: e.tag, keys: e.keys, body: Buffer.from(e.body),
        properties: new Map(Object.entries(e.props)), messageGroup: e.group,
      });
      if (!receipt?.messageId) fail(`${e.body}: send receipt without message id`);
      expects.set(e.body, e);
      stats.sent++;
    };
    for (let i = 0; i < 10; i++) {
      await send({ body: `normal-${i}`, tag: 'TagA', keys: [`key-${i}`, 'node-key'], props: { idx: String(i) } });
    }
    await send({ body: 'fifo-0', tag: 'TagF', keys: ['fifo-key'], props: { kind: 'fifo' }, group: 'node-group-1' });
    log(`sent ${stats.sent} messages to ${topic}`);

    const verify = (m, e, attempt) => {
      const sameSet = (a, b) => a.length === b.length && [...a].sort().join('\u0000') === [...b].sort().join('\u0000');
      if (m.topic !== topic) fail(`${e.body}: topic ${m.topic}, want ${topic}`);
      if (m.tag !== e.tag) fail(`${e.body}: tag ${m.tag}, want ${e.tag}`);
      if (!sameSet(m.keys ?? [], e.keys)) fail(`${e.body}: keys ${m.keys}, want ${e.keys}`);
      const props = Object.fromEntries(m.properties ?? new Map());
      if (JSON.stringify(props) !== JSON.stringify(e.props)) {
        fail(`${e.body}: user properties ${JSON.stringify(props)}, want ${JSON.stringify(e.props)}`);
      }
      if ((m.messageGroup || undefined) !== e.group) fail(`${e.body}: message group ${m.messageGroup}, want ${e.group}`);
      if (m.deliveryAttempt !== attempt) fail(`${e.body}: delivery attempt ${m.deliveryAttempt}, want ${attempt}`);
      if (m.corrupted) fail(`${e.body}: body checksum mismatch (corrupted)`);
    };

    // Phase 1: each of the 11 received and acked exactly once.
    const phase1InvisibleMs = 5000;
    const acked = new Map();
    const deadline = Date.now() + 45_000;
    while (acked.size < expects.size && Date.now() < deadline) {
      for (const m of await receive(consumer, 16, phase1InvisibleMs)) {
        const body = bodyOf(m);
        const e = expects.get(body);
        if (!e) { fail(`unexpected message ${body}`); continue; }
        if (acked.has(body)) { fail(`${body}: received again after it was acked (attempt ${m.deliveryAttempt})`); continue; }
        verify(m, e, 1);
        try { await consumer.ack(m); } catch (err) { fail(`${body}: ack threw ${err?.message ?? err}`); }
        acked.set(body, Date.now());
        stats.received++;
      }
    }
    const missing = [...expects.keys()].filter((b) => !acked.has(b));
    if (missing.length) fail(`phase 1: never received ${missing}`);
    log(`phase 1: received and acked ${acked.size}/${expects.size}`);

    // Phase 2: received, not acked, back after 2 s with attempt 2.
    const probe = { body: 'probe-0', tag: 'TagP', keys: ['probe-key'], props: { kind: 'probe' } };
    await send(probe);
    let first = null;
    const probeDeadline = Date.now() + 20_000;
    while (first === null && Date.now() < probeDeadline) {
      for (const m of await receive(consumer, 1, 2000)) {
        if (bodyOf(m) !== probe.body) { fail(`phase 2: unexpected ${bodyOf(m)}`); continue; }
        verify(m, probe, 1);
        first = Date.now();
        stats.received++;
      }
    }
    if (first === null) {
      fail('phase 2: probe-0 was never received');
    } else {
      let back = null;
      while (back === null && Date.now() < probeDeadline + 10_000) {
        for (const m of await receive(consumer, 1, 10_000)) {
          if (bodyOf(m) !== probe.body) { fail(`phase 2: unexpected ${bodyOf(m)}`); continue; }
          back = (Date.now() - first) / 1000;
          verify(m, probe, 2);
          if (back < 1.5) fail(`phase 2: probe-0 came back after ${back}s, before its 2 s invisibility`);
          await consumer.ack(m);
          stats.redelivered++;
        }
      }
      if (back === null) fail('phase 2: probe-0 (not acked, invisible 2 s) never came back');
      else log(`phase 2: probe-0 came back after ${back.toFixed(2)}s with attempt 2 and was acked`);
    }

    // Phase 3: once the acked receipts' invisibility ran out, nothing comes back.
    const wait = Math.max(...acked.values()) + phase1InvisibleMs + 500 - Date.now();
    if (wait > 0) await sleep(wait);
    for (const m of await receive(consumer, 16, 10_000)) {
      fail(`phase 3: acked message ${bodyOf(m)} came back (attempt ${m.deliveryAttempt})`);
    }
    log('phase 3: nothing came back');
  } finally {
    await shutdownAll(started);
  }
}

async function runFifoCheck(endpoint, namesrv, stats) {
  const suffix = randomUUID().slice(0, 8);
  const topic = `node-fifo-${suffix}`;
  const group = `node-fifo-group-${suffix}`;
  try {
    execFileSync(binary, ['admin', 'group-create', '-n', namesrv, '-c', 'DefaultCluster', '-g', group, '--orderly'],
      { stdio: 'pipe', timeout: 30_000 });
  } catch (e) {
    fail(`fifo: tidemark admin group-create --orderly failed: ${e.stdout ?? ''}${e.stderr ?? e.message}`);
    return;
  }
  const producer = new Producer({ endpoints: endpoint, topics: [topic], requestTimeout: 5000, logger: clientLog });
  const consumer = new SimpleConsumer({
    endpoints: endpoint, consumerGroup: group, requestTimeout: 5000, logger: clientLog,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 3000,
  });
  const groups = ['order-a', 'order-b', 'order-c'];
  const perGroup = 3;
  const problemsBefore = problems.length;
  const started = [];
  try {
    await producer.startup();
    started.push(producer);
    for (let i = 0; i < perGroup; i++) {
      for (const g of groups) {
        await producer.send({ topic, tag: 'TagF', messageGroup: g, body: Buffer.from(`${g}/${i}`) });
      }
    }
    await consumer.startup();
    started.push(consumer);
    const next = new Map(groups.map((g) => [g, 0]));
    const held = new Set();
    const pending = [];
    const take = (messages) => {
      for (const m of messages) {
        const g = m.messageGroup ?? '';
        const want = `${g}/${next.get(g) ?? 0}`;
        if (bodyOf(m) !== want) {
          fail(`fifo: group ${g}: received ${bodyOf(m)}, want ${want} (out of order or repeated)`);
          return false;
        }
        next.set(g, (next.get(g) ?? 0) + 1);
        held.add(g);
        pending.push(m);
      }
      return true;
    };
    const total = () => [...next.values()].reduce((a, b) => a + b, 0);
    let rounds = 0;
    const deadline = Date.now() + 60_000;
    while (total() < perGroup * groups.length) {
      rounds++;
      if (Date.now() > deadline || rounds > 60) {
        fail(`fifo: received ${JSON.stringify([...next])} of ${perGroup} per group after ${rounds} rounds`);
        break;
      }
      // Two at a time: more of a group than one receive takes, so holding them blocks the rest.
      if (!take(await receive(consumer, 2, 20_000))) break;
      if (!pending.length) continue;
      // Holding those unacknowledged (checked in the first rounds; each check waits out a long
      // poll): whatever else arrives must be of other groups.
      const more = rounds <= 3 ? await receive(consumer, 2, 20_000) : [];
      for (const m of more) {
        if (held.has(m.messageGroup ?? '')) {
          fail(`fifo: received ${bodyOf(m)} while an earlier message of group ${m.messageGroup} was unacknowledged`);
        }
      }
      if (problems.length > problemsBefore || !take(more)) break;
      for (const m of pending) await consumer.ack(m);
      stats.fifo += pending.length;
      pending.length = 0;
      held.clear();
    }
    const again = await receive(consumer, 2, 20_000);
    if (again.length) fail(`fifo: received ${again.length} messages again after all were acknowledged`);
    log(`fifo: ${stats.fifo} messages in ${groups.length} groups received in order, exactly once, in ${rounds} rounds`);
  } finally {
    await shutdownAll(started);
  }
}

const server = new Server();
const watchdog = setTimeout(async () => {
  log(`FAIL: run exceeded ${WATCHDOG_MS / 1000} s; stopping the server`);
  log(`server stop: ${await server.stop()}`);
  process.exit(1);
}, WATCHDOG_MS);
const startedAt = Date.now();
const stats = { sent: 0, received: 0, redelivered: 0, fifo: 0 };
let serverTail = '';
try {
  await server.start();
  await runCheck(server.grpc, stats);
  await runFifoCheck(server.grpc, server.namesrv, stats);
} catch (e) {
  fail(`${e?.constructor?.name}: ${e?.message ?? e}`);
} finally {
  serverTail = server.tail(30);
  log(`server stop: ${await server.stop()}`);
  clearTimeout(watchdog);
}
const elapsed = ((Date.now() - startedAt) / 1000).toFixed(1);
const figures = `sent=${stats.sent} received=${stats.received} redelivered=${stats.redelivered} fifo=${stats.fifo}`;
if (!problems.length) {
  fs.rmSync(logHome, { recursive: true, force: true });
  log(`${figures} ok (elapsed ${elapsed}s)`);
  process.exit(0);
}
log(`${figures}`);
log(`FAILED with ${problems.length} problem(s) (elapsed ${elapsed}s):`);
for (const p of problems) log(`  - ${p}`);
log(`server log tail:\n${serverTail}`);
log(`client logs kept in ${logHome}`);
process.exit(1);
