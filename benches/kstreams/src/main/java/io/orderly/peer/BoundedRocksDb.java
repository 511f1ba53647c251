package io.orderly.peer;

import java.util.Map;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.WriteBufferManager;

/**
 * Bounded RocksDB memory for every store instance of the process (the pattern of the Kafka Streams memory
 * management guide): one LRU block cache of {@link #BLOCK_CACHE_BYTES} shared by all stores, whose memtables
 * are charged to it through one WriteBufferManager of {@link #MEMTABLE_BYTES}; index and filter blocks live
 * in the cache too. Streams' own default is a 50 MiB block cache and 3 x 16 MiB memtables per store
 * instance (8 instances here: 4 tasks x 2 stores), far more than orderly's 16 MiB state cache plus sled's.
 * Each store gets memtables of {@link #WRITE_BUFFER_BYTES}, at most 2, so flushes are few at bench sizes.
 */
public final class BoundedRocksDb implements RocksDBConfigSetter {
    static final long BLOCK_CACHE_BYTES = 64L << 20;
    static final long MEMTABLE_BYTES = 32L << 20;
    static final long WRITE_BUFFER_BYTES = 8L << 20;

    private static final Cache CACHE = new LRUCache(BLOCK_CACHE_BYTES, -1, false, 0.1);
    private static final WriteBufferManager WRITE_BUFFERS = new WriteBufferManager(MEMTABLE_BYTES, CACHE);

    @Override
    public void setConfig(String storeName, Options options, Map<String, Object> configs) {
        BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
        table.setBlockCache(CACHE);
        table.setCacheIndexAndFilterBlocks(true);
        table.setCacheIndexAndFilterBlocksWithHighPriority(true);
        table.setPinTopLevelIndexAndFilter(true);
        options.setWriteBufferManager(WRITE_BUFFERS);
        options.setWriteBufferSize(WRITE_BUFFER_BYTES);
        options.setMaxWriteBufferNumber(2);
        options.setTableFormatConfig(table);
    }

    @Override
    public void close(String storeName, Options options) {
        // The cache and the write buffer manager are shared by every store: never closed per store.
    }
}
