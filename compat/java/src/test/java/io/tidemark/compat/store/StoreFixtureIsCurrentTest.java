package io.tidemark.compat.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.parser.Feature;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Regenerates the store fixture with the real rocketmq-store 4.9.7 into a temp directory and
 * checks it against the checked-in one under crates/store/tests/fixtures/java-store. Store
 * timestamps come from the clock, so they (and everything derived from them: checkpoint values,
 * index file names and header times) are only checked for sanity; every other manifest field, the
 * consume-queue bytes and the commit-log bytes outside the STORETIMESTAMP fields must be equal.
 *
 * <p>With {@code -Dstore.fixture.write=true} the fixture is regenerated in place instead.
 */
class StoreFixtureIsCurrentTest {

    private static final String REGENERATE = "regenerate with `mvn -q -f compat/java test -Dstore.fixture.write=true`";

    private static Path checkedIn;
    private static Path freshDir;
    private static Path tempDir;
    private static JSONObject fresh;
    private static JSONObject old;

    @BeforeAll
    static void generate() throws Exception {
        checkedIn = StoreFixture.fixtureDir();
        if (Boolean.getBoolean("store.fixture.write")) {
            freshDir = checkedIn;
        } else {
            tempDir = Files.createTempDirectory("tidemark-store-fixture");
            freshDir = tempDir;
        }
        fresh = parse(StoreFixture.generate(freshDir).manifestJson());
        Path manifest = checkedIn.resolve("manifest.json");
        if (!Files.exists(manifest)) {
            fail("no checked-in store fixture at " + checkedIn + "; " + REGENERATE);
        }
        old = parse(Files.readString(manifest, StandardCharsets.UTF_8));
    }

    @AfterAll
    static void cleanUp() throws Exception {
        if (tempDir != null) {
            StoreFixture.deleteTree(tempDir);
        }
    }

    private static JSONObject parse(String json) {
        return JSON.parseObject(json, Feature.OrderedField);
    }

    @Test
    void messagesMatchExceptStoreTimestamps() {
        JSONArray a = fresh.getJSONArray("messages");
        JSONArray b = old.getJSONArray("messages");
        assertEquals(b.size(), a.size(), "message count; " + REGENERATE);
        List<String> problems = new ArrayList<>();
        for (int i = 0; i < a.size(); i++) {
            JSONObject x = (JSONObject) a.getJSONObject(i).clone();
            JSONObject y = (JSONObject) b.getJSONObject(i).clone();
            x.remove("storeTimestamp");
            y.remove("storeTimestamp");
            if (!x.equals(y)) {
                problems.add("message " + i + "\n  now:        " + x + "\n  checked in: " + y);
            }
        }
        if (!problems.isEmpty()) {
            fail("store fixture manifest is stale; " + REGENERATE + "\n" + String.join("\n", problems));
        }
    }

    @Test
    void storeFactsMatchExceptClockDerivedOnes() {
        for (String variant : List.of("store", "storeAbort")) {
            JSONObject x = withoutClock(fresh.getJSONObject(variant));
            JSONObject y = withoutClock(old.getJSONObject(variant));
            assertEquals(y, x, variant + " facts differ; " + REGENERATE);
        }
        assertEquals(old.getJSONObject("config"), fresh.getJSONObject("config"));
    }

    @Test
    void timestampsAreSane() {
        for (JSONObject m : List.of(fresh, old)) {
            JSONArray msgs = m.getJSONArray("messages");
            long first = msgs.getJSONObject(0).getLongValue("storeTimestamp");
            long last = msgs.getJSONObject(msgs.size() - 1).getLongValue("storeTimestamp");
            long prev = first;
            for (int i = 0; i < msgs.size(); i++) {
                long ts = msgs.getJSONObject(i).getLongValue("storeTimestamp");
                assertTrue(ts >= prev, "store timestamps must not go backwards at message " + i);
                assertTrue(ts > msgs.getJSONObject(i).getLongValue("bornTimestamp"));
                prev = ts;
            }
            JSONObject cp = m.getJSONObject("store").getJSONObject("checkpoint");
            for (String f : List.of("physicMsgTimestamp", "logicsMsgTimestamp")) {
                long v = cp.getLongValue(f);
                assertTrue(v >= first && v <= last, "clean checkpoint " + f + " " + v + " outside [" + first + ", " + last + "]");
            }
            JSONObject abort = m.getJSONObject("storeAbort");
            long pinned = msgs.getJSONObject(abort.getIntValue("checkpointPinnedToMessage")).getLongValue("storeTimestamp");
            assertEquals(pinned, abort.getLongValue("checkpointPinnedStoreTimestamp"));
            assertEquals(pinned, abort.getJSONObject("checkpoint").getLongValue("physicMsgTimestamp"));
            assertEquals(pinned, abort.getJSONObject("checkpoint").getLongValue("logicsMsgTimestamp"));
            JSONObject index = m.getJSONObject("store").getJSONArray("indexFiles").getJSONObject(0);
            assertEquals(first, index.getLongValue("beginTimestamp"));
            assertEquals(last, index.getLongValue("endTimestamp"));
        }
    }

    @Test
    void layoutIsWhatRustTestsExpect() {
        JSONObject store = fresh.getJSONObject("store");
        assertFalse(store.getBooleanValue("abortFilePresent"));
        assertTrue(fresh.getJSONObject("storeAbort").getBooleanValue("abortFilePresent"));
        assertTrue(Files.notExists(freshDir.resolve("store/lock")) && Files.notExists(freshDir.resolve("store-abort/lock")));
        // The whole point of the volume: full segments ending in a blank record, a two-file consume queue.
        assertTrue(store.getJSONArray("blankRecords").size() >= 2);
        assertTrue(Files.exists(freshDir.resolve("store/consumequeue/TopicA/0/00000000000000002000")));
    }

    /** Consume queues hold no clock values: they must be byte-identical. */
    @Test
    void consumeQueueFilesAreIdentical() throws Exception {
        for (String variant : List.of("store", "store-abort")) {
            Path a = freshDir.resolve(variant).resolve("consumequeue");
            Path b = checkedIn.resolve(variant).resolve("consumequeue");
            List<Path> files = StoreFixture.listFiles(a);
            assertEquals(StoreFixture.listFiles(b).stream().map(b::relativize).toList(), files.stream().map(a::relativize).toList());
            for (Path f : files) {
                byte[] x = Files.readAllBytes(f);
                byte[] y = Files.readAllBytes(b.resolve(a.relativize(f)));
                assertTrue(java.util.Arrays.equals(x, y), variant + " " + a.relativize(f) + " differs; " + REGENERATE);
            }
        }
    }

    /** The commit log differs only in each record's STORETIMESTAMP (8 bytes at record + 56 with IPv4 hosts). */
    @Test
    void commitLogBytesAreIdenticalOutsideStoreTimestamps() throws Exception {
        JSONArray msgs = fresh.getJSONArray("messages");
        for (String variant : List.of("store", "store-abort")) {
            Path a = freshDir.resolve(variant).resolve("commitlog");
            Path b = checkedIn.resolve(variant).resolve("commitlog");
            List<Path> files = StoreFixture.listFiles(a);
            assertEquals(StoreFixture.listFiles(b).stream().map(b::relativize).toList(), files.stream().map(a::relativize).toList());
            for (Path f : files) {
                long base = Long.parseLong(f.getFileName().toString());
                byte[] x = Files.readAllBytes(f);
                byte[] y = Files.readAllBytes(b.resolve(f.getFileName()));
                assertEquals(y.length, x.length);
                for (int i = 0; i < msgs.size(); i++) {
                    long off = msgs.getJSONObject(i).getLongValue("commitLogOffset") - base;
                    if (off >= 0 && off < x.length) {
                        ByteBuffer.wrap(x).putLong((int) off + 56, 0);
                        ByteBuffer.wrap(y).putLong((int) off + 56, 0);
                    }
                }
                assertTrue(java.util.Arrays.equals(x, y), variant + " commitlog/" + f.getFileName() + " differs; " + REGENERATE);
            }
        }
    }

    /** Drops what the clock decides: checkpoint times, index file names and header times. */
    private static JSONObject withoutClock(JSONObject facts) {
        JSONObject c = JSON.parseObject(facts.toJSONString(), Feature.OrderedField);
        c.remove("checkpointPinnedStoreTimestamp");
        JSONObject cp = c.getJSONObject("checkpoint");
        cp.remove("physicMsgTimestamp");
        cp.remove("logicsMsgTimestamp");
        cp.remove("indexMsgTimestamp");
        for (Object o : c.getJSONArray("indexFiles")) {
            JSONObject f = (JSONObject) o;
            f.remove("name");
            f.remove("beginTimestamp");
            f.remove("endTimestamp");
        }
        for (Object o : c.getJSONArray("files")) {
            JSONObject f = (JSONObject) o;
            if (f.getString("path").startsWith("index/")) {
                f.put("path", "index/<yyyyMMddHHmmssSSS>");
            }
        }
        return c;
    }
}
