package io.tidemark.compat.suite;

import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Extra {@code tidemark dev} arguments for one test class (one array element per argument), appended
 * by {@link SuiteBase} to the harness's command line on every start and restart. Without the
 * annotation the command line is unchanged.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.TYPE)
@Inherited
@interface DevArgs {

    /**
     * 18 levels of 1 s .. 18 s (RocketMQ's {@code messageDelayLevel} syntax), so the broker's default
     * retry level 3 + reconsumeTimes means 3 s, 4 s, 5 s, ... instead of 10 s, 30 s, 1 min, ...
     */
    String SHORT_DELAY_LEVELS = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s";

    String[] value();
}
