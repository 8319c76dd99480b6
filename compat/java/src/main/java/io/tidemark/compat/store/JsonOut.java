package io.tidemark.compat.store;

import java.util.List;
import java.util.Map;

/**
 * Minimal JSON writer with stable member order (insertion order of the maps given), so the
 * manifest diffs cleanly in git. Small objects whose values are all scalars are written on one
 * line, which keeps one message per line.
 */
final class JsonOut {

    private JsonOut() {
    }

    static String write(Object value) {
        StringBuilder b = new StringBuilder();
        write(b, value, 0);
        return b.append('\n').toString();
    }

    private static void write(StringBuilder b, Object v, int indent) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof String s) {
            string(b, s);
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map<?, ?> m) {
            boolean flat = m.values().stream().allMatch(JsonOut::scalar);
            b.append('{');
            int n = 0;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                b.append(n++ == 0 ? "" : ",");
                if (flat) {
                    b.append(n == 1 ? "" : " ");
                } else {
                    newline(b, indent + 1);
                }
                string(b, e.getKey().toString());
                b.append(": ");
                write(b, e.getValue(), indent + 1);
            }
            if (!flat && n > 0) {
                newline(b, indent);
            }
            b.append('}');
        } else if (v instanceof List<?> l) {
            boolean flat = l.stream().allMatch(JsonOut::scalar);
            b.append('[');
            for (int i = 0; i < l.size(); i++) {
                b.append(i == 0 ? "" : flat ? ", " : ",");
                if (!flat) {
                    newline(b, indent + 1);
                }
                write(b, l.get(i), indent + 1);
            }
            if (!flat && !l.isEmpty()) {
                newline(b, indent);
            }
            b.append(']');
        } else {
            throw new IllegalArgumentException("not JSON-able: " + v.getClass());
        }
    }

    private static boolean scalar(Object v) {
        return !(v instanceof Map) && !(v instanceof List);
    }

    private static void newline(StringBuilder b, int indent) {
        b.append('\n').append("  ".repeat(indent));
    }

    /** Non-ASCII and control characters are escaped so the separators \u0001/\u0002 stay visible. */
    private static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                default -> {
                    if (c < 0x20 || c > 0x7E) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
