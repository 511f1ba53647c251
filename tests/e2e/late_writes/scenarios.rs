//! The scenarios: three members through a schedule of pauses and broker
//! restarts, with what Kafka's own tool says of the transactions left open.

use std::collections::HashMap;
use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::kafka_native::make_compacting;
use crate::support::{end_offsets, signal, wait_until, Instance, Reaper};
use crate::world::{stop, tail, Broker, World};
use crate::{required_env, PARTITIONS, SHORT_SESSION_TIMEOUT_MS};

use super::verify::{restore_fresh_and_verify, show_output_regressions};

/// The fixed schedule of the pauses-only scenario.
pub(super) const PAUSES: [Fault; 3] = [Fault::Pause(0), Fault::Pause(1), Fault::Pause(0)];

/// One step of a scenario's fault schedule.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fault {
    /// A member stopped (SIGSTOP) past its session timeout, then resumed.
    Pause(usize),
    /// The broker stopped (SIGTERM: a controlled shutdown) or killed
    /// (SIGKILL), down for `down_s` seconds, then started on its data.
    Restart { kill: bool, down_s: u64 },
    /// A member stopped, the broker restarted meanwhile, the member resumed
    /// once the broker is back and the group moved on.
    PausedThroughRestart {
        member: usize,
        kill: bool,
        down_s: u64,
    },
    /// The leaders of the input's and the changelog's partitions moved to
    /// other brokers while write-outs are open (a cluster only).
    MoveLeaders,
    /// The controller quorum's leader killed, down `down_s` seconds, then
    /// started again (a cluster only).
    KillController { down_s: u64 },
    /// One node cut off the other nodes (replication, the coordinators'
    /// markers, the controller quorum) for `down_s` seconds, longer than
    /// its broker session, and with `clients` off its clients too; the
    /// node with the controller quorum's leader when `controller` (a
    /// cluster only).
    Isolate {
        controller: bool,
        clients: bool,
        down_s: u64,
    },
}

/// The brokers a scenario's faults act on: one node of the test's own
/// ([`Broker`]), or the three-node cluster ([`crate::cluster::Cluster`]).
pub(crate) trait Brokers {
    fn bootstrap(&self) -> String;
    /// One broker stopped (or killed), down `down_s` seconds, started again
    /// on its data: the broker, or the next node of a rolling restart.
    fn restart(&mut self, kill: bool, down_s: u64);
    /// See [`Fault::MoveLeaders`].
    fn move_leaders(&mut self, topics: &[&str]);
    /// See [`Fault::KillController`].
    fn kill_controller(&mut self, down_s: u64);
    /// See [`Fault::Isolate`].
    fn isolate(&mut self, topics: &[&str], controller: bool, clients: bool, down_s: u64);
    /// Every partition loses its leader when the broker restarts: Kafka 4.3
    /// and 4.4 can then lose a transaction marker (KAFKA-20734), which
    /// stops a changelog partition for ever.
    fn single_node(&self) -> bool;
}

impl Brokers for Broker {
    fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }
    fn restart(&mut self, kill: bool, down_s: u64) {
        restart(self, kill, down_s);
    }
    fn move_leaders(&mut self, _topics: &[&str]) {
        panic!("one broker leads every partition: moving leaders needs the cluster");
    }
    fn kill_controller(&mut self, down_s: u64) {
        restart(self, true, down_s);
    }
    fn isolate(&mut self, _topics: &[&str], _controller: bool, _clients: bool, _down_s: u64) {
        panic!("one broker has no others to be cut off from: isolating needs the cluster");
    }
    fn single_node(&self) -> bool {
        true
    }
}

/// A schedule for [`through_restarts`]: a graceful restart, a kill, a
/// pause, another, a member paused across a restart of either kind, in a
/// random order, members and downtimes drawn from `seed`. With it, the
/// member of the first pause and the write-out it stops itself in
/// ([`scenario`]'s `armed`).
fn restart_schedule(seed: u64) -> (Vec<Fault>, (usize, u32)) {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut schedule = vec![
        Fault::Restart {
            kill: false,
            down_s: rng.gen_range(2..=5),
        },
        Fault::Restart {
            kill: true,
            down_s: rng.gen_range(2..=5),
        },
        Fault::Pause(rng.gen_range(0..3)),
        Fault::Pause(rng.gen_range(0..3)),
        Fault::PausedThroughRestart {
            member: rng.gen_range(0..3),
            kill: rng.gen(),
            down_s: rng.gen_range(2..=5),
        },
    ];
    schedule.shuffle(&mut rng);
    let member = schedule
        .iter()
        .find_map(|fault| match *fault {
            Fault::Pause(member) | Fault::PausedThroughRestart { member, .. } => Some(member),
            Fault::Restart { .. }
            | Fault::MoveLeaders
            | Fault::KillController { .. }
            | Fault::Isolate { .. } => None,
        })
        .expect("the schedule pauses a member");
    (schedule, (member, rng.gen_range(3..=12)))
}

pub(super) fn through_restarts(guarantee: &str, workload_seed: u64) {
    let seed = std::env::var("ORDERLY_E2E_FAULT_SEED")
        .ok()
        .map(|s| s.parse().expect("ORDERLY_E2E_FAULT_SEED is a number"))
        .unwrap_or_else(|| rand::random::<u32>() as u64);
    let (schedule, armed) = restart_schedule(seed);
    eprintln!(
        "fault schedule (ORDERLY_E2E_FAULT_SEED={seed} replays it): {schedule:?}; member {} stops itself \
         inside its write-out {} (stop_queued)",
        armed.0, armed.1
    );
    let mut data = tempfile::tempdir().expect("tempdir");
    if std::env::var_os("ORDERLY_TEST_KEEP").is_some() {
        data.disable_cleanup(true);
        eprintln!("broker directory kept: {}", data.path().display());
    }
    let mut broker = crate::world::Broker::start(data.path().join("kafka"));
    scenario(
        guarantee,
        workload_seed,
        &schedule,
        Some(armed),
        Some(&mut broker),
    );
    eprintln!("fault schedule was ORDERLY_E2E_FAULT_SEED={seed}");
}

/// Three members run through `schedule` (broker restarts need `broker`,
/// the broker `World` is on), the input produced in waves before, during
/// and after each step; the changelog made compacting after the second
/// step; then every partition processed to the end and a fresh member's
/// restore checked against the input. `armed` (member, n): that member
/// also stops itself inside its n-th write-out, its records queued
/// (`stop_queued`), and stays stopped until a step resumes it (or the end,
/// once the group moved on): a late write-out for certain, where a SIGSTOP
/// lands wherever the member is.
pub(crate) fn scenario(
    guarantee: &str,
    seed: u64,
    schedule: &[Fault],
    armed: Option<(usize, u32)>,
    mut broker: Option<&mut dyn Brokers>,
) {
    let world = World::new(match &broker {
        Some(broker) => broker.bootstrap(),
        None => required_env("ORDERLY_E2E_BOOTSTRAP"),
    })
    .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    // A paused member stays stopped past its session timeout (4/3 of it in
    // all), so the group moves its partitions on without it.
    let session = Duration::from_millis(world.session_timeout_ms);
    let changelog = format!("{}-changelog", world.topic);
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed,
        ..Default::default()
    });
    let wave_count = 3 * schedule.len() + 3;
    let mut waves = records.chunks(records.len() / wave_count + 1);
    let mut next_wave = || {
        if let Some(wave) = waves.next() {
            world.produce(wave);
        }
    };
    let reaper = Reaper::default();
    let settings = format!(
        "{guarantee}commit_interval_ms = 100\nbatch_max_records = 100\nbatch_max_wait_ms = 5"
    );
    let members: Vec<Instance> = (0..3).map(|_| world.instance(&settings)).collect();
    next_wave();
    let mut runs: Vec<std::process::Child> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let fault = armed
                .filter(|(member, _)| *member == i)
                .map(|(_, n)| format!("stop_queued:{n}"));
            reaper.watch(m.spawn_run(fault.as_deref()))
        })
        .collect();
    let progressed = wait_until(Duration::from_secs(90), || world.committed_total() > 0);
    assert!(
        progressed,
        "the group makes progress\n{}",
        tail(&members[0].log())
    );
    let started = std::time::Instant::now();
    for (step, fault) in schedule.iter().enumerate() {
        eprintln!(
            "scenario: step {step} at {:.0} s: {fault:?}",
            started.elapsed().as_secs_f64()
        );
        next_wave();
        match *fault {
            Fault::Pause(member) => {
                signal(&runs[member], "STOP");
                std::thread::sleep(session / 2);
                next_wave();
                std::thread::sleep(session * 5 / 6);
                moved_on(&world);
                signal(&runs[member], "CONT");
            }
            Fault::Restart { kill, down_s } => {
                let broker = broker.as_deref_mut().expect("a broker of the test's own");
                broker.restart(kill, down_s);
                next_wave();
            }
            Fault::MoveLeaders => {
                let broker = broker.as_deref_mut().expect("a cluster of the test's own");
                broker.move_leaders(&[&world.topic, &changelog]);
                next_wave();
            }
            Fault::KillController { down_s } => {
                let broker = broker.as_deref_mut().expect("a cluster of the test's own");
                broker.kill_controller(down_s);
                next_wave();
            }
            Fault::Isolate {
                controller,
                clients,
                down_s,
            } => {
                let broker = broker.as_deref_mut().expect("a cluster of the test's own");
                broker.isolate(&[&world.topic, &changelog], controller, clients, down_s);
                next_wave();
            }
            Fault::PausedThroughRestart {
                member,
                kill,
                down_s,
            } => {
                signal(&runs[member], "STOP");
                let broker = broker.as_deref_mut().expect("a broker of the test's own");
                broker.restart(kill, down_s);
                next_wave();
                std::thread::sleep(session * 4 / 3);
                moved_on(&world);
                signal(&runs[member], "CONT");
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        if step == 1 {
            // The changelog (created by orderly) is compacted from here
            // on: the waves still to come roll its segments.
            make_compacting(&world.bootstrap, &changelog);
        }
        next_wave();
    }
    if armed.is_some() {
        // A member still stopped at its fault point resumes now.
        moved_on(&world);
        for run in &runs {
            signal(run, "CONT");
        }
    }
    eprintln!(
        "scenario: schedule done at {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for _ in 0..wave_count {
        next_wave();
    }
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let stopped_on_open_transaction = || {
        members
            .iter()
            .any(|m| m.log().contains("did not end in 60 s"))
    };
    let settled = wait_until(Duration::from_secs(240), || {
        world.committed() == ends || stopped_on_open_transaction()
    }) && world.committed() == ends;
    if !settled {
        // Kafka's single-node hang (docs/exactly-once.md, "Hanging
        // transactions"): the transaction coordinator completed a
        // transaction without writing its marker to a changelog partition
        // that had no leader during the broker's shutdown, so the partition
        // holds a transaction no coordinator tracks any more, and orderly's
        // restore of it waits, then stops the member naming it, as it
        // should. `orderly repair` is what an operator runs then: the run
        // goes on through it to the same end checks; anything else fails
        // below.
        let open = open_transactions(&world.bootstrap, &changelog);
        let untracked = !open.is_empty()
            && open.iter().all(|t| {
                matches!(
                    t.coordinator_state.as_str(),
                    "Empty" | "CompleteCommit" | "CompleteAbort"
                )
            });
        // Only where Kafka can lose the marker: on three brokers (RF 3) a
        // restart moves leadership and the run must end exact.
        let single_node = broker.as_ref().is_some_and(|b| b.single_node());
        if single_node && untracked && stopped_on_open_transaction() {
            for t in &open {
                eprintln!(
                    "scenario: KAFKA LOST A TRANSACTION MARKER (not orderly's doing): changelog partition {} \
                     holds a transaction of producer {} open since offset {} while its coordinator says {}; \
                     the restore waited, then stopped naming it; repairing it with `orderly repair --apply`",
                    t.partition, t.producer_id, t.start, t.coordinator_state
                );
            }
            let partitions: Vec<i32> = open.iter().map(|t| t.partition).collect();
            crate::repair::stop_and_repair(&mut runs, &members[0], &partitions);
            world.finish(&members[0]);
            restore_fresh_and_verify(
                &world, &changelog, &settings, guarantee, &expected, "scenario",
            );
            return;
        }
    }
    assert!(
        settled,
        "the group caught up (committed {:?}, ends {ends:?})\n{}",
        world.committed(),
        members
            .iter()
            .map(|m| tail(&m.log()))
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    eprintln!(
        "scenario: every partition processed to the end at {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if armed.is_some() {
        // A member that reached its fault point only now resumes too: its
        // write-out lands after the group processed everything.
        for run in &runs {
            signal(run, "CONT");
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    std::thread::sleep(Duration::from_secs(1));
    for (run, member) in runs.iter_mut().zip(&members) {
        stop(run, member);
    }
    let fenced: usize = members
        .iter()
        .map(|m| m.log().matches("partition fenced").count())
        .sum();
    let lost: usize = members
        .iter()
        .map(|m| m.log().matches("partition lost").count())
        .sum();
    let started_over: usize = members
        .iter()
        .map(|m| m.log().matches("starting it over").count())
        .sum();
    let self_stopped: usize = members
        .iter()
        .map(|m| m.log().matches("stopping at stop_queued").count())
        .sum();
    let waited: usize = members
        .iter()
        .map(|m| {
            m.log()
                .matches("a transaction is open on the changelog partition")
                .count()
        })
        .sum();
    eprintln!(
        "scenario: {fenced} fenced partitions ({started_over} started over), {lost} lost revokes, \
         {waited} restores that waited for an open transaction across the members; \
         {self_stopped} member(s) stopped at stop_queued"
    );
    if show_output_regressions(&world) {
        for member in &members {
            let log = member.log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    [
                        "transaction",
                        "fenced",
                        "restor",
                        "revoked",
                        "assigned",
                        "lost",
                        "abort",
                        "WARN",
                        "ERROR",
                    ]
                    .iter()
                    .any(|w| l.contains(w))
                })
                .collect::<Vec<_>>();
            eprintln!("--- member log (selected lines)\n{}", lines.join("\n"));
        }
    }
    restore_fresh_and_verify(
        &world, &changelog, &settings, guarantee, &expected, "scenario",
    );
}

/// A transaction open on a changelog partition, as Kafka's own tool shows
/// it: the partition, where it starts, its producer id, and what the
/// transaction coordinator says of that producer's transactional id.
pub(super) struct OpenTransaction {
    pub(super) partition: i32,
    pub(super) start: i64,
    pub(super) producer_id: i64,
    pub(super) coordinator_state: String,
}

/// Runs `kafka-transactions.sh` (`kafka/broker tool transactions`),
/// printing what it says, and returns the transactions open on the
/// changelog's partitions.
pub(super) fn open_transactions(bootstrap: &str, changelog: &str) -> Vec<OpenTransaction> {
    let tool = |args: &[&str]| {
        let out = std::process::Command::new(crate::world::broker_script())
            .args(["tool", "transactions", "--bootstrap-server", bootstrap])
            .args(args)
            .output()
            .expect("kafka/broker tool transactions");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!(
            "kafka-transactions {}:\n{text}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let rows = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .filter(|r: &Vec<String>| !r.is_empty())
            .collect()
    };
    // TransactionalId, Coordinator, ProducerId, TransactionState.
    let states: HashMap<i64, String> = rows(&tool(&["list"]))
        .into_iter()
        .filter(|r| r.len() >= 4)
        .filter_map(|r| Some((r[2].parse().ok()?, r[3].clone())))
        .collect();
    let mut open = Vec::new();
    for partition in 0..PARTITIONS {
        let text = tool(&[
            "describe-producers",
            "--topic",
            changelog,
            "--partition",
            &partition.to_string(),
        ]);
        // ProducerId, ProducerEpoch, LatestCoordinatorEpoch, LastSequence,
        // LastTimestamp, CurrentTransactionStartOffset.
        for row in rows(&text).into_iter().filter(|r| r.len() >= 6) {
            let (Ok(producer_id), Ok(start)) = (row[0].parse::<i64>(), row[5].parse::<i64>())
            else {
                continue;
            };
            open.push(OpenTransaction {
                partition,
                start,
                producer_id,
                coordinator_state: states.get(&producer_id).cloned().unwrap_or_default(),
            });
        }
    }
    open
}

/// Waits (up to 30 s) until the group has processed every record so far
/// without the paused member: a write-out it still holds, if it lands when
/// it resumes, then lands behind newer states of its keys (what fencing
/// must keep from becoming visible).
fn moved_on(world: &World) {
    world.caught_up(Duration::from_secs(30));
}

/// The broker stopped (or killed), down `down_s` seconds, started again.
pub(super) fn restart(broker: &mut Broker, kill: bool, down_s: u64) {
    if kill {
        broker.kill();
    } else {
        broker.stop();
    }
    std::thread::sleep(Duration::from_secs(down_s));
    broker.restart();
}
