package io.orderly.peer;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * The four outcomes, in memory, summed over every task of this instance. Exact for the bench's runs (one
 * instance, no failure): a task that is re-processed after a crash or a fencing would count its replayed
 * records again here (its state would not change: the version check and the inbox hold), where orderly's
 * counters live in its checkpoint, atomic with the state.
 */
public final class Counters {
    public final LongAdder applied = new LongAdder();
    public final LongAdder duplicates = new LongAdder();
    public final LongAdder stale = new LongAdder();
    public final LongAdder deadLettered = new LongAdder();
    public final LongAdder statusChanges = new LongAdder();
    /** Commits requested by --commit-when-idle-ms's punctuator. */
    public final LongAdder idleCommits = new LongAdder();
    private final AtomicLong firstRecordMs = new AtomicLong(0);

    public static final Counters INSTANCE = new Counters();

    public void seen() {
        if (firstRecordMs.get() == 0) firstRecordMs.compareAndSet(0, System.currentTimeMillis());
    }

    public long firstRecordMs() {
        return firstRecordMs.get();
    }

    public long records() {
        return applied.sum() + duplicates.sum() + stale.sum() + deadLettered.sum();
    }
}
