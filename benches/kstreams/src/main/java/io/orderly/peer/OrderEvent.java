package io.orderly.peer;

/** One decoded order event: the v2 reader's view of any writer version (orderly's event::OrderEvent). */
public record OrderEvent(String eventId, String orderId, long version, int eventType, long amount, String currency,
                         long occurredAt) {
    /** The Avro enum symbols, in schema order (event::EventType::SYMBOLS). */
    public static final String[] SYMBOLS = {"CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"};

    public static int typeIndex(String symbol) {
        for (int i = 0; i < SYMBOLS.length; i++) {
            if (SYMBOLS[i].equals(symbol)) return i;
        }
        return -1;
    }
}
