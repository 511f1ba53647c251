//! sled alone, written the way a restore writes it: what one key costs.
//!
//! A restore from nothing writes every key of a partition's state into an
//! empty sled tree, one insert per key (docs/performance.md, "Restore of a
//! large state"). This bench writes the same pattern with nothing else
//! running, so the store's own cost per key can be read apart from the
//! changelog's fetches: `--keys` keys of `--value-bytes` bytes over
//! `--trees` trees (one thread each, as the partitions' restores run),
//! in one of three orders:
//!
//! * `random`: the changelog's order (keys hashed to partitions arrive in
//!   no key order);
//! * `batched`: sorted within batches of 8 MiB, as `RestoreWrite` writes;
//! * `sorted`: one sorted pass, the best case for a B-tree.
//!
//! It prints the wall time, the process's CPU time and the CPU per key.
//!
//! `--packed BYTES` writes the keys as a restore from nothing writes them
//! since layout 4: in packed runs of about BYTES each
//! (the encoding of orderly's `engine::runs`), one sled insert per
//! run, not per key.
//!
//! ```sh
//! cargo bench --bench sled_floor -- [--keys 1000000] [--trees 4] [--value-bytes 180] \
//!     [--cache-mb 64] [--orders random,batched,sorted] [--packed BYTES] [--dir /dev/shm]
//! ```

use std::time::Instant;

use anyhow::{bail, Context};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The restore's batch bound (`RESTORE_BATCH_BYTES`).
const BATCH_BYTES: usize = 8 << 20;

struct Args {
    keys: usize,
    trees: usize,
    value_bytes: usize,
    cache_mb: u64,
    orders: Vec<String>,
    packed: Option<usize>,
    dir: std::path::PathBuf,
}

fn parse() -> anyhow::Result<Args> {
    let mut args = Args {
        keys: 1_000_000,
        trees: 4,
        value_bytes: 180,
        cache_mb: 64,
        orders: vec!["random".into(), "batched".into(), "sorted".into()],
        packed: None,
        dir: std::env::temp_dir(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // cargo bench passes --bench to every bench binary.
        if flag == "--bench" {
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--keys" => args.keys = value.parse().context("--keys")?,
            "--trees" => args.trees = value.parse().context("--trees")?,
            "--value-bytes" => args.value_bytes = value.parse().context("--value-bytes")?,
            "--cache-mb" => args.cache_mb = value.parse().context("--cache-mb")?,
            "--orders" => args.orders = value.split(',').map(str::to_string).collect(),
            "--dir" => args.dir = value.into(),
            "--packed" => args.packed = Some(value.parse().context("--packed")?),
            other => bail!("unknown option {other}"),
        }
    }
    if args.trees == 0 || args.keys < args.trees {
        bail!("--trees must be at least 1 and at most --keys");
    }
    Ok(args)
}

/// The process's CPU time (user and system, every thread), in seconds.
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .context("/proc/self/stat")?
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).context("utime")?.parse::<f64>()?
        + fields.get(12).context("stime")?.parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// One tree's keys, in the order `order` writes them. Keys look like the
/// store's (`o` and a 32-hex-digit order id).
fn keys_of(
    tree: usize,
    trees: usize,
    per_tree: usize,
    value_bytes: usize,
    order: &str,
) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..per_tree)
        .map(|i| {
            let id = (i * trees + tree) as u64;
            let mixed = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            format!("o{mixed:016x}{id:016x}").into_bytes()
        })
        .collect();
    match order {
        "sorted" => keys.sort_unstable(),
        "batched" => {
            let per_batch = (BATCH_BYTES / (value_bytes + 33)).max(1);
            for batch in keys.chunks_mut(per_batch) {
                batch.sort_unstable();
            }
        }
        _ => {}
    }
    keys
}

/// Writes `keys` (in the order given) in runs of about `run_bytes`, each
/// under `r` + the last key it holds, encoded as `engine::runs` encodes
/// them: a count, the entries' offsets, then each entry's key length, key,
/// kind byte, value length and value.
fn write_packed(
    tree: &sled::Tree,
    keys: Vec<Vec<u8>>,
    value: &[u8],
    run_bytes: usize,
) -> sled::Result<()> {
    let mut data: Vec<u8> = Vec::new();
    let mut offsets: Vec<u32> = Vec::new();
    let mut last: Vec<u8> = Vec::new();
    let flush = |data: &mut Vec<u8>, offsets: &mut Vec<u32>, last: &[u8]| {
        let header = 4 + 4 * offsets.len();
        let mut run = Vec::with_capacity(header + data.len());
        run.extend_from_slice(&(offsets.len() as u32).to_le_bytes());
        for offset in offsets.drain(..) {
            run.extend_from_slice(&(offset + header as u32).to_le_bytes());
        }
        run.append(data);
        let mut key = vec![b'r', 0, 0, 0, 0];
        key.extend_from_slice(last);
        tree.insert(key, run).map(drop)
    };
    for key in keys {
        offsets.push(data.len() as u32);
        data.extend_from_slice(&(key.len() as u32).to_le_bytes());
        data.extend_from_slice(&key);
        data.push(1);
        data.extend_from_slice(&(value.len() as u32).to_le_bytes());
        data.extend_from_slice(value);
        last = key;
        if data.len() >= run_bytes {
            flush(&mut data, &mut offsets, &last)?;
        }
    }
    if !offsets.is_empty() {
        flush(&mut data, &mut offsets, &last)?;
    }
    Ok(())
}

fn run(args: &Args, order: &str) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("orderly-sled-floor-")
        .tempdir_in(&args.dir)?;
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(args.cache_mb << 20)
        .open()?;
    let per_tree = args.keys / args.trees;
    let keys: Vec<Vec<Vec<u8>>> = (0..args.trees)
        .map(|t| keys_of(t, args.trees, per_tree, args.value_bytes, order))
        .collect();
    let value = vec![7u8; args.value_bytes];
    let (cpu_before, started) = (cpu_seconds()?, Instant::now());
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut writers = Vec::new();
        for (t, keys) in keys.into_iter().enumerate() {
            let tree = db.open_tree(format!("partition/bench/{t}"))?;
            let value = &value;
            let packed = args.packed;
            writers.push(scope.spawn(move || -> sled::Result<()> {
                match packed {
                    None => {
                        for key in keys {
                            tree.insert(key, value.as_slice())?;
                        }
                    }
                    Some(bytes) => write_packed(&tree, keys, value, bytes)?,
                }
                Ok(())
            }));
        }
        for writer in writers {
            writer
                .join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        }
        Ok(())
    })?;
    db.flush()?;
    let (wall, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds()? - cpu_before);
    let written = per_tree * args.trees;
    let packed = args
        .packed
        .map_or_else(String::new, |bytes| format!(" in runs of {bytes} bytes"));
    println!(
        "{order:>8}{packed}: {written} keys of {} bytes over {} trees, cache {} MiB: {wall:.2} s wall, {cpu:.2} s CPU, \
         {:.2} µs CPU per key, {:.0} keys/s",
        args.value_bytes,
        args.trees,
        args.cache_mb,
        cpu * 1e6 / written as f64,
        written as f64 / wall
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = parse()?;
    for order in &args.orders {
        if !matches!(order.as_str(), "random" | "batched" | "sorted") {
            bail!("unknown order {order} (random, batched or sorted)");
        }
        run(&args, order)?;
    }
    Ok(())
}
