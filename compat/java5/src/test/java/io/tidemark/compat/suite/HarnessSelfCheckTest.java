package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

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
        assertEquals(3, p.length);
        assertTrue(p[1] - 2 > 1024 && p[1] + 1 <= 65535, "broker port " + p[1]);
        assertNotEquals(p[0], p[1] - 2);
        assertNotEquals(p[0], p[1]);
        assertNotEquals(p[0], p[1] + 1);
        for (int other : new int[] {p[0], p[1] - 2, p[1], p[1] + 1}) {
            assertNotEquals(other, p[2], "gRPC port " + p[2]);
        }
    }

    @Test
    void portsComeFromBelowTheEphemeralRange() {
        int low = TidemarkProcess.ephemeralLow();
        assumeTrue(low - TidemarkProcess.PORT_LOW >= 1000, "ephemeral range starts at " + low);
        for (int i = 0; i < 20; i++) {
            int port = TidemarkProcess.freePort();
            assertTrue(port >= TidemarkProcess.PORT_LOW && port < low,
                "port " + port + " outside [" + TidemarkProcess.PORT_LOW + ", " + low + ")");
        }
    }

    @Test
    void namesAreUnique() {
        assertNotEquals(Names.topic("x"), Names.topic("x"));
    }
}
