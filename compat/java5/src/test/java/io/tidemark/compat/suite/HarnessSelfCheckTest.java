package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.rocketmq.common.MQVersion;
import org.junit.jupiter.api.Test;

/** Untagged: what the default `mvn test` runs. No Tidemark needed. */
class HarnessSelfCheckTest {

    @Test
    void clientOnTheClasspathIsA5xRelease() {
        String v = MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION);
        assertTrue(v.startsWith("V5_"), "expected a 5.x rocketmq-client, got " + v);
    }

    @Test
    void portsLeaveRoomForVipAndHaListeners() {
        int[] p = TidemarkProcess.pickPorts();
        assertEquals(2, p.length);
        assertTrue(p[1] - 2 > 1024 && p[1] + 1 <= 65535, "broker port " + p[1]);
        assertNotEquals(p[0], p[1] - 2);
        assertNotEquals(p[0], p[1]);
        assertNotEquals(p[0], p[1] + 1);
    }

    @Test
    void namesAreUnique() {
        assertNotEquals(Names.topic("x"), Names.topic("x"));
    }
}
