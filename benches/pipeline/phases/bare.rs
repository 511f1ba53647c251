//! (a) a bare consumer (assign all partitions from the beginning, no group,
//! no commits) reading and discarding every record: the broker+client limit;
//! (b) the same plus Avro decoding with a warm schema cache.

use std::hint::black_box;
use std::time::Duration;

use rdkafka::message::Message;

use orderly::testkit::Decoder;

use super::{plain_consumer, read_all};
use crate::figures::Phase;
use crate::loader::LoadInfo;
use crate::measure::Meter;
use crate::Args;

/// (a): read and discard every record.
pub fn read_discard(
    args: &Args,
    load: &LoadInfo,
    broker_pid: Option<u32>,
    timeout: Duration,
) -> anyhow::Result<Phase> {
    let m = Meter::start(broker_pid);
    let consumer = plain_consumer(args, &load.bootstrap)?;
    let n = read_all(&consumer, load, timeout, |msg| {
        black_box(msg.payload());
    })?;
    Ok(m.finish_read("a", "bare consumer (read + discard)", n))
}

/// (b): read and decode every record (the decoder's cache already warm).
pub fn read_decode(
    args: &Args,
    load: &LoadInfo,
    decoder: &Decoder<orderly::Orders>,
    runtime: &tokio::runtime::Runtime,
    broker_pid: Option<u32>,
    timeout: Duration,
) -> anyhow::Result<Phase> {
    let m = Meter::start(broker_pid);
    let consumer = plain_consumer(args, &load.bootstrap)?;
    let n = read_all(&consumer, load, timeout, |msg| {
        let decoded = match decoder.decode_cached(msg.payload()) {
            Some(result) => result,
            None => runtime.block_on(decoder.decode(msg.payload())),
        };
        black_box(decoded.is_ok());
    })?;
    Ok(m.finish_read("b", "consumer + Avro decode", n))
}
