//! rdkafka's polling threads, as orderly's copy of the crate patches them
//! (vendor/rdkafka/PATCH.md). An idle producer costs no CPU: its polling
//! thread waits, it does not spin (rdkafka 0.39 truncated the remaining
//! poll time to whole milliseconds, so the last part of every 100 ms poll
//! spun on the clock: about 1% of a core per producer, and an `orderly run`
//! holds one transactional producer per partition). And a dropped client
//! wakes its polling thread instead of waiting for its poll to end.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

/// CPU ticks (utime + stime, 1/100 s) of this process's threads named
/// like rdkafka's producer polling threads.
fn polling_threads_ticks() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut ticks = 0;
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.starts_with("producer pollin") {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // The fields after the command name, which is in parentheses.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat; `rest` starts at field 3.
        for i in [11, 12] {
            ticks += fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    ticks
}

#[test]
fn idle_producers_polling_threads_do_not_spin() {
    let cluster = MockCluster::new(1).expect("a mock cluster");
    let producers: Vec<FutureProducer> = (0..10)
        .map(|_| {
            ClientConfig::new()
                .set("bootstrap.servers", cluster.bootstrap_servers())
                .create()
                .expect("a producer")
        })
        .collect();
    // Let them connect and settle.
    std::thread::sleep(Duration::from_millis(500));
    let before = polling_threads_ticks();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let ticks = polling_threads_ticks() - before;
    let seconds = started.elapsed().as_secs_f64();
    drop(producers);
    // Spinning for the last part of a millisecond of every 100 ms poll,
    // 10 producers burn about 0.1 CPU-s a second: some 30 ticks here. Waiting,
    // they burn next to none.
    assert!(
        ticks < 8,
        "10 idle producers' polling threads used {ticks} CPU ticks (1/100 s) in {seconds:.1} s"
    );
}

/// Dropping a producer or an admin client wakes its polling thread instead
/// of joining it once its current 100 ms wait ends (vendor/rdkafka/PATCH.md):
/// the fence drops refused producers while a partition waits, and start-up
/// drops several admin clients in a row.
#[test]
fn dropping_a_client_does_not_wait_out_its_polling_thread() {
    use rdkafka::admin::AdminClient;
    use rdkafka::client::DefaultClientContext;

    let cluster = MockCluster::new(1).expect("a mock cluster");
    let config = || {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", cluster.bootstrap_servers());
        config
    };
    const CLIENTS: u32 = 20;
    let mut producers = Duration::ZERO;
    let mut admins = Duration::ZERO;
    for _ in 0..CLIENTS {
        let producer: FutureProducer = config().create().expect("a producer");
        let admin: AdminClient<DefaultClientContext> = config().create().expect("an admin client");
        // Their polling threads are inside a wait by now.
        std::thread::sleep(Duration::from_millis(30));
        let started = Instant::now();
        drop(producer);
        producers += started.elapsed();
        let started = Instant::now();
        drop(admin);
        admins += started.elapsed();
    }
    // Joining after the wait ends costs 50 ms a drop on average: 1 s for 20.
    // Woken, a drop costs what librdkafka's own teardown does.
    eprintln!(
        "dropping {CLIENTS} producers took {producers:?}, {CLIENTS} admin clients {admins:?}"
    );
    for (what, took) in [("producers", producers), ("admin clients", admins)] {
        assert!(
            took < Duration::from_millis(400),
            "dropping {CLIENTS} {what} took {took:?}"
        );
    }
}
