package io.orderly.peer;

/**
 * A record that will never decode: dead-lettered. The kinds are orderly's codec::PoisonKind labels
 * (empty_payload, bad_magic_byte, unknown_schema, bad_schema, undecodable, invalid), written to the
 * orderly.error.kind header.
 */
public final class PoisonException extends RuntimeException {
    public final String kind;

    public PoisonException(String kind, String message) {
        super(kind + ": " + message, null, false, false); // no stack trace: poison is data, not a bug
        this.kind = kind;
    }
}
