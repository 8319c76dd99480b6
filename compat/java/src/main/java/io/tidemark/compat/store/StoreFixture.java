package io.tidemark.compat.store;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import io.tidemark.compat.fixtures.Fixtures;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.StoreCheckpoint;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Writes a small store directory with the real Apache RocketMQ 4.9.7 {@link DefaultMessageStore}
 * (no broker, no client, no remoting) plus a {@code manifest.json} describing every record, so the
 * Rust store can be tested against files the Java store really produced.
 *
 * <p>One store run yields two directories: {@code store-abort/} is a copy taken while the store is
 * still running (after an explicit flush, before shutdown), i.e. what a crash would leave behind;
 * {@code store/} is the same directory after a clean {@code shutdown()}. Both hold the same
 * messages at the same offsets with the same store timestamps.
 */
public final class StoreFixture {

    public static final String REPO_RELATIVE_DIR = "crates/store/tests/fixtures/java-store";
    public static final String STORE_VERSION = "org.apache.rocketmq:rocketmq-store:4.9.7";

    static final int COMMIT_LOG_FILE_SIZE = 64 * 1024;
    static final int CQ_ENTRIES_PER_FILE = 100;
    static final int CQ_FILE_SIZE = CQ_ENTRIES_PER_FILE * ConsumeQueue.CQ_STORE_UNIT_SIZE;
    /** Tiny index geometry (default is 5M slots / 20M entries, ~420 MB per file) sized so one file holds every key. */
    static final int INDEX_HASH_SLOTS = 64;
    static final int INDEX_MAX_ENTRIES = 1024;
    /** The crash copy's checkpoint is pinned to this message (see {@link #pinCheckpoint}). */
    static final int CHECKPOINT_AT_MESSAGE = 149;

    /** Offsets inside a stored record (IPv4 hosts) that this class reads back; see protocol doc §5.1. */
    private static final int POS_STORE_TIMESTAMP = 56;
    private static final int POS_BODY_LENGTH = 84;

    private StoreFixture() {
    }

    /** Result of one generator run: the manifest and where it was written. */
    public record Generated(Path root, String manifestJson) {
    }

    public static Path fixtureDir() {
        String override = System.getProperty("store.fixture.dir");
        if (override != null && !override.isBlank()) {
            return Paths.get(override).toAbsolutePath().normalize();
        }
        return Fixtures.repoRoot().resolve(REPO_RELATIVE_DIR).normalize();
    }

    static MessageStoreConfig config(Path storeDir) {
        MessageStoreConfig c = new MessageStoreConfig();
        c.setStorePathRootDir(storeDir.toString());
        c.setStorePathCommitLog(storeDir.resolve("commitlog").toString());
        c.setMappedFileSizeCommitLog(COMMIT_LOG_FILE_SIZE);
        c.setMappedFileSizeConsumeQueue(CQ_FILE_SIZE);
        c.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        c.setBrokerRole(BrokerRole.ASYNC_MASTER);
        // The pool is direct memory committed into the file by another thread: more moving parts, no value here.
        c.setTransientStorePoolEnable(false);
        c.setWarmMapedFileEnable(false);
        c.setMessageIndexEnable(true);
        c.setMaxHashSlotNum(INDEX_HASH_SLOTS);
        c.setMaxIndexNum(INDEX_MAX_ENTRIES);
        // Never bound (see withoutHaAcceptor); 0 in case a future version binds it anyway.
        c.setHaListenPort(0);
        // Only the flush service's first, immediate thorough pass may touch the checkpoint file
        // during a run (see generate); a slow machine must not get a second one.
        c.setFlushConsumeQueueThoroughInterval(10 * 60 * 1000);
        return c;
    }

    /** Generates store/, store-abort/ and manifest.json under {@code out} (the two dirs are replaced). */
    public static Generated generate(Path out) throws Exception {
        Path store = out.resolve("store");
        Path abort = out.resolve("store-abort");
        deleteTree(store);
        deleteTree(abort);
        Files.createDirectories(store);

        List<FixtureMessages.Spec> specs = FixtureMessages.all();
        Map<String, Integer> expected = FixtureMessages.expectedQueueCounts(specs);
        List<Map<String, Object>> messages = new ArrayList<>();
        Map<String, Object> storeFacts = new LinkedHashMap<>();
        Map<String, Object> abortFacts = new LinkedHashMap<>();
        long[] pinned = new long[1];

        // The store's disk check (1 s after start, then every 10 s) refuses every write once the
        // disk is 90% full: CI disks full of build output made message 0 fail that way.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");
        BrokerStatsManager stats = new BrokerStatsManager("TidemarkFixture", true);
        DefaultMessageStore ms = new DefaultMessageStore(config(store), stats,
            (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap, properties) -> { }, new BrokerConfig());
        boolean started = false;
        try {
            if (!ms.load()) {
                throw new IllegalStateException("DefaultMessageStore.load() failed for " + store);
            }
            withoutHaAcceptor(ms);
            ms.start();
            started = true;
            // The consume-queue flush service's first pass (about 1 s after start) is a "thorough"
            // one that also writes the checkpoint file. Let it pass while the store is empty so that
            // nothing but pinCheckpoint writes the checkpoint before shutdown.
            Thread.sleep(2500);

            List<AppendMessageResult> results = new ArrayList<>();
            for (FixtureMessages.Spec spec : specs) {
                PutMessageResult r = ms.putMessage(spec.toInner());
                if (r.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                    throw new IllegalStateException("message " + spec.index() + ": " + r);
                }
                results.add(r.getAppendMessageResult());
                if (spec.index() == CHECKPOINT_AT_MESSAGE) {
                    awaitDispatch(ms, FixtureMessages.expectedQueueCounts(specs.subList(0, spec.index() + 1)));
                    pinned[0] = r.getAppendMessageResult().getStoreTimestamp();
                    pinCheckpoint(ms, pinned[0]);
                }
            }
            awaitDispatch(ms, expected);

            for (int i = 0; i < specs.size(); i++) {
                messages.add(describe(ms, specs.get(i), results.get(i)));
            }
            List<Map<String, Object>> queues = new ArrayList<>();
            for (String tq : expected.keySet()) {
                String topic = tq.substring(0, tq.indexOf('/'));
                int queueId = Integer.parseInt(tq.substring(tq.indexOf('/') + 1));
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("topic", topic);
                q.put("queueId", queueId);
                q.put("minOffset", ms.getMinOffsetInQueue(topic, queueId));
                q.put("maxOffset", ms.getMaxOffsetInQueue(topic, queueId));
                queues.add(q);
            }
            storeFacts.put("minPhyOffset", ms.getMinPhyOffset());
            storeFacts.put("maxPhyOffset", ms.getMaxPhyOffset());
            storeFacts.put("queues", queues);

            // "Crash": msync everything the store wrote, then copy the directory while the store is
            // live. Mapped writes are in the page cache, so the copy sees exactly what a killed JVM
            // would leave on disk; the checkpoint file still holds the pinned, lagging values and the
            // abort marker is present.
            ms.flush();
            flushConsumeQueues(ms);
            copyTree(store, abort);
        } finally {
            if (started) {
                ms.shutdown();
            }
            stats.shutdown();
        }
        // The store holds a FileLock on "lock" and never deletes it; a fixture has no use for it.
        Files.deleteIfExists(store.resolve("lock"));

        storeFacts.putAll(describeDir(store));
        storeFacts.put("blankRecords", blankRecords(messages));
        abortFacts.put("producedBy", "copy of store/ taken while the DefaultMessageStore was running, after all puts "
            + "were dispatched and DefaultMessageStore.flush() plus ConsumeQueue.flush(0) for every queue; shutdown() ran "
            + "only afterwards, on store/. 'lock' excluded. The checkpoint file on disk was last written by "
            + "StoreCheckpoint.flush() right after message " + CHECKPOINT_AT_MESSAGE + " was dispatched.");
        abortFacts.put("checkpointPinnedToMessage", CHECKPOINT_AT_MESSAGE);
        abortFacts.put("checkpointPinnedStoreTimestamp", pinned[0]);
        abortFacts.putAll(describeDir(abort));

        Map<String, Object> manifest = new LinkedHashMap<>();
        manifest.put("generator", "compat/java io.tidemark.compat.store.StoreFixture");
        manifest.put("library", STORE_VERSION + " (DefaultMessageStore used directly; rocketmq-common 4.9.8 on the classpath)");
        manifest.put("config", configFacts());
        manifest.put("store", storeFacts);
        manifest.put("storeAbort", abortFacts);
        manifest.put("messages", messages);
        String json = JsonOut.write(manifest);
        Files.writeString(out.resolve("manifest.json"), json, StandardCharsets.UTF_8);
        return new Generated(out, json);
    }

    /**
     * Writes the checkpoint the way the flush services would right after flushing through the
     * given store timestamp: both the commit-log and consume-queue stamps equal it, the index stamp
     * stays 0 (the store only sets it when an index file fills up).
     */
    private static void pinCheckpoint(DefaultMessageStore ms, long storeTimestamp) {
        ms.flush();
        flushConsumeQueues(ms);
        StoreCheckpoint cp = ms.getStoreCheckpoint();
        cp.setPhysicMsgTimestamp(storeTimestamp);
        cp.setLogicsMsgTimestamp(storeTimestamp);
        cp.flush();
    }

    private static void flushConsumeQueues(DefaultMessageStore ms) {
        ms.getConsumeQueueTable().values().forEach(m -> m.values().forEach(cq -> cq.flush(0)));
    }

    private static void awaitDispatch(DefaultMessageStore ms, Map<String, Integer> expected) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            boolean done = ms.dispatchBehindBytes() == 0;
            for (Map.Entry<String, Integer> e : expected.entrySet()) {
                String tq = e.getKey();
                String topic = tq.substring(0, tq.indexOf('/'));
                int queueId = Integer.parseInt(tq.substring(tq.indexOf('/') + 1));
                done &= ms.getMaxOffsetInQueue(topic, queueId) >= e.getValue();
            }
            if (done) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("consume queues did not catch up within 60 s");
            }
            Thread.sleep(10);
        }
    }

    /** One manifest entry; the record is re-read from the commit log so the facts are what the store wrote. */
    private static Map<String, Object> describe(DefaultMessageStore ms, FixtureMessages.Spec spec, AppendMessageResult r) {
        byte[] rec = new byte[r.getWroteBytes()];
        SelectMappedBufferResult sb = ms.selectOneMessageByOffset(r.getWroteOffset(), r.getWroteBytes());
        if (sb == null) {
            throw new IllegalStateException("cannot read back message " + spec.index());
        }
        try {
            sb.getByteBuffer().get(rec);
        } finally {
            sb.release();
        }
        ByteBuffer b = ByteBuffer.wrap(rec);
        int bodyLength = b.getInt(POS_BODY_LENGTH);
        int topicLength = rec[POS_BODY_LENGTH + 4 + bodyLength];
        int propsAt = POS_BODY_LENGTH + 4 + bodyLength + 1 + topicLength;
        int propsLength = b.getShort(propsAt);
        String storedProps = new String(rec, propsAt + 2, propsLength, StandardCharsets.UTF_8);
        check(spec, "totalSize", b.getInt(0), r.getWroteBytes());
        check(spec, "queueOffset", b.getLong(20), r.getLogicsOffset());
        check(spec, "physicalOffset", b.getLong(28), r.getWroteOffset());
        check(spec, "storeTimestamp", b.getLong(POS_STORE_TIMESTAMP), r.getStoreTimestamp());
        check(spec, "record end", propsAt + 2 + propsLength, rec.length);

        Map<String, Object> m = new LinkedHashMap<>();
        m.put("index", spec.index());
        m.put("topic", spec.topic());
        m.put("queueId", spec.queueId());
        m.put("queueOffset", r.getLogicsOffset());
        m.put("commitLogOffset", r.getWroteOffset());
        m.put("size", r.getWroteBytes());
        m.put("msgId", r.getMsgId());
        m.put("storeTimestamp", r.getStoreTimestamp());
        m.put("bornTimestamp", spec.bornTimestamp());
        m.put("magic", String.format("0x%08X", b.getInt(4)));
        m.put("bodyCRC", b.getInt(8));
        m.put("flag", b.getInt(16));
        m.put("sysFlag", b.getInt(36));
        m.put("tagsCode", MessageExtBrokerInner.tagsString2tagsCode(spec.tags()));
        m.put("tags", spec.tags());
        m.put("keys", spec.keys());
        m.put("uniqKey", spec.uniqKey());
        m.put("propertiesString", storedProps);
        m.put("bodyLength", bodyLength);
        m.put("bodyHex", HexFormat.of().formatHex(rec, POS_BODY_LENGTH + 4, POS_BODY_LENGTH + 4 + bodyLength));
        return m;
    }

    private static void check(FixtureMessages.Spec spec, String what, long actual, long expected) {
        if (actual != expected) {
            throw new IllegalStateException("message " + spec.index() + ": stored " + what + " " + actual + " != " + expected);
        }
    }

    /** Where each full commit-log segment's end-of-file filler sits: right after its last message. */
    private static List<Map<String, Object>> blankRecords(List<Map<String, Object>> messages) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (int i = 0; i + 1 < messages.size(); i++) {
            long off = (Long) messages.get(i).get("commitLogOffset");
            long end = off + (Integer) messages.get(i).get("size");
            long next = (Long) messages.get(i + 1).get("commitLogOffset");
            if (next / COMMIT_LOG_FILE_SIZE != off / COMMIT_LOG_FILE_SIZE) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("segment", String.format("%020d", off / COMMIT_LOG_FILE_SIZE * COMMIT_LOG_FILE_SIZE));
                m.put("position", end % COMMIT_LOG_FILE_SIZE);
                m.put("physicalOffset", end);
                m.put("blankLength", next - end);
                m.put("afterMessage", messages.get(i).get("index"));
                out.add(m);
            }
        }
        return out;
    }

    private static Map<String, Object> configFacts() {
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("mappedFileSizeCommitLog", COMMIT_LOG_FILE_SIZE);
        c.put("mappedFileSizeConsumeQueue", CQ_FILE_SIZE);
        c.put("flushDiskType", "ASYNC_FLUSH");
        c.put("brokerRole", "ASYNC_MASTER");
        c.put("transientStorePoolEnable", false);
        c.put("messageIndexEnable", true);
        c.put("maxHashSlotNum", INDEX_HASH_SLOTS);
        c.put("maxIndexNum", INDEX_MAX_ENTRIES);
        c.put("bornHost", "127.0.0.1:50000");
        c.put("storeHost", "127.0.0.1:10911");
        c.put("seed", FixtureMessages.SEED);
        return c;
    }

    /** File-level facts a reader of the directory can check without Java. */
    private static Map<String, Object> describeDir(Path dir) throws IOException {
        Map<String, Object> d = new LinkedHashMap<>();
        List<Map<String, Object>> files = new ArrayList<>();
        for (Path p : listFiles(dir)) {
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("path", dir.relativize(p).toString().replace('\\', '/'));
            f.put("size", Files.size(p));
            files.add(f);
        }
        d.put("files", files);
        d.put("abortFilePresent", Files.exists(dir.resolve("abort")));
        Path cp = dir.resolve("checkpoint");
        if (Files.exists(cp)) {
            ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(cp));
            Map<String, Object> c = new LinkedHashMap<>();
            c.put("fileSize", b.capacity());
            c.put("physicMsgTimestamp", b.getLong(0));
            c.put("logicsMsgTimestamp", b.getLong(8));
            c.put("indexMsgTimestamp", b.getLong(16));
            d.put("checkpoint", c);
        }
        List<Map<String, Object>> index = new ArrayList<>();
        Path indexDir = dir.resolve("index");
        if (Files.isDirectory(indexDir)) {
            for (Path p : listFiles(indexDir)) {
                ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(p));
                Map<String, Object> f = new LinkedHashMap<>();
                f.put("name", p.getFileName().toString());
                f.put("size", b.capacity());
                f.put("beginTimestamp", b.getLong(0));
                f.put("endTimestamp", b.getLong(8));
                f.put("beginPhyOffset", b.getLong(16));
                f.put("endPhyOffset", b.getLong(24));
                f.put("hashSlotCount", b.getInt(32));
                f.put("indexCount", b.getInt(36));
                index.add(f);
            }
        }
        d.put("indexFiles", index);
        return d;
    }

    static List<Path> listFiles(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            return s.filter(Files::isRegularFile).sorted(Comparator.comparing(p -> dir.relativize(p).toString())).toList();
        }
    }

    static void copyTree(Path from, Path to) throws IOException {
        for (Path p : listFiles(from)) {
            Path rel = from.relativize(p);
            if (rel.toString().equals("lock")) {
                continue;
            }
            Files.createDirectories(to.resolve(rel).getParent());
            Files.copy(p, to.resolve(rel));
        }
        // Empty directories (e.g. a consume-queue parent before its first file) are part of the layout too.
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : s.filter(Files::isDirectory).toList()) {
                Files.createDirectories(to.resolve(from.relativize(p)));
            }
        }
    }

    static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> {
                try {
                    Files.delete(p);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = args.length > 0 ? Paths.get(args[0]).toAbsolutePath().normalize() : fixtureDir();
        // The store and BrokerStatsManager leave non-daemon threads behind, on failure too; exit explicitly.
        int status = 1;
        try {
            Generated g = generate(out);
            System.out.println("wrote store/, store-abort/ and manifest.json to " + g.root());
            status = 0;
        } finally {
            System.exit(status);
        }
    }

    /**
     * start() would open the master's HA acceptor on every interface. A fixture has no slaves and
     * our tests listen on loopback only, so the store gets an HA service that never binds.
     */
    private static void withoutHaAcceptor(DefaultMessageStore ms) throws ReflectiveOperationException, IOException {
        java.lang.reflect.Field field = DefaultMessageStore.class.getDeclaredField("haService");
        field.setAccessible(true);
        field.set(ms, new org.apache.rocketmq.store.ha.HAService(ms) {
            @Override
            public void start() {
            }

            @Override
            public void shutdown() {
            }
        });
    }
}
