//! `run`: join the group and process until SIGTERM or SIGINT, with the
//! start-up checks before and the HTTP endpoint throughout.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::shared::{load_config, Chosen, Exit};
use crate::config::{Config, EntityKind};
use crate::domains::latest::Latest;
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;
use crate::engine::store::Store;
use crate::ops::preflight;
use crate::processor::Processor;
use crate::registry::Registry;

/// `run` for the chosen entity (`entity.kind`'s, or a user's own).
pub(super) async fn command<E: Entity + Clone>(
    chosen: Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    // Listen before anything else, so a signal during start-up is a
    // clean stop, not the default kill.
    let shutdown = shutdown_signal()?;
    let config = load_config(file)?;
    match chosen {
        Chosen::Given(entity) => run(entity, config, shutdown).await,
        Chosen::Configured => match config.entity.kind {
            EntityKind::Orders => run(Orders, config, shutdown).await,
            EntityKind::Stock => run(Stock, config, shutdown).await,
            EntityKind::Latest => run(Latest::from_config(&config.entity)?, config, shutdown).await,
        },
    }
}

/// `run` for `entity`: the start-up checks, the processor and its HTTP
/// endpoint, until `shutdown`.
async fn run<E: Entity>(
    entity: E,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Exit> {
    let store_path = preflight::absolute(&config.store.path);
    tracing::info!(store = %store_path.display(), existing = preflight::store_present(&store_path), "opening the store");
    let store = Store::open(&store_path, config.store.cache_capacity_mb)?;
    let registry = Registry::from_config(&config.registry)?;
    let http = config.http_address()?;
    let input_topic = config.kafka.input_topic.clone();
    let kept = store.clone();
    let start_config = config.clone();
    let reader_schema = entity.reader_schema().cloned();
    let processor = Processor::for_entity(entity, config, store, registry.clone());
    // The endpoint answers from start-up on, before the checks below (which
    // wait on the cluster): /healthz, and /readyz saying what the
    // processor waits for. It stops once the processor has.
    let server = match http {
        Some(address) => Some(crate::ops::http::serve(
            crate::ops::http::bind(address)?,
            &processor,
        )?),
        None => None,
    };
    // A signal during the checks (which may wait on a cluster that does
    // not answer) stops the process there, as it would later.
    tokio::pin!(shutdown);
    let checked = tokio::select! {
        biased;
        () = &mut shutdown => None,
        checked = start_checks(&start_config, &registry, reader_schema.as_ref()) => Some(checked),
    };
    let result = match checked {
        None => {
            tracing::info!("stopped during start-up, before joining the group");
            if let Some(server) = server {
                server.stop().await;
            }
            return Ok(Exit::Success);
        }
        Some(Ok(())) => processor.run(shutdown).await.map_err(anyhow::Error::from),
        Some(Err(e)) => Err(e),
    };
    if let Some(server) = server {
        server.stop().await;
    }
    let report = result?;
    // This run's decisions, and what the store holds over every run
    // (the durable counters of this instance's checkpoints).
    let held: crate::engine::outcomes::Outcomes = kept
        .checkpoints()
        .unwrap_or_default()
        .into_iter()
        .filter(|(t, _, _)| *t == input_topic)
        .map(|(_, _, c)| c.counts())
        .sum();
    let report = report.outcomes;
    tracing::info!(
        "exiting: this run decided applied={} duplicates={} stale={} dead_lettered={}; this store holds, over all runs, \
         applied={} duplicates={} stale={} dead_lettered={}",
        report.applied,
        report.duplicates,
        report.stale,
        report.dead_lettered,
        held.applied,
        held.duplicates,
        held.stale,
        held.dead_lettered
    );
    Ok(Exit::Success)
}

/// What `run` checks before it joins the group, while its endpoint already
/// answers: the security the cluster enforces, the registry, the schema
/// guard, offsets moved outside orderly.
async fn start_checks(
    config: &Config,
    registry: &Registry,
    reader: Option<&apache_avro::Schema>,
) -> Result<()> {
    refuse_what_security_refuses(config).await?;
    // Something that answers, but not like a schema registry, is a
    // wrong URL, and a refusal of the credentials or a certificate
    // that does not verify is a setting to fix: stop now rather
    // than retry every record. An unreachable registry is waited
    // for record by record.
    match registry.probe().await {
        Err(e @ crate::registry::RegistryError::NotARegistry { .. }) => return Err(e.into()),
        Err(e) if e.is_access_failure() => return Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "schema registry not reachable at start-up; records wait for it")
        }
        Ok(()) => {}
    }
    schema_guard(config, registry, reader).await?;
    refuse_external_resets(config).await
}

/// Refuses to run when the group's committed offsets were moved by another
/// tool away from orderly's checkpoints (the checkpoint would win and the
/// reset be ignored in silence). A check that cannot be made (broker not
/// reachable yet) is logged and passed over: the processor waits for the
/// broker on its own.
///
/// A coordinator that is not ready yet (a fresh broker loading its offsets
/// topic answers NotCoordinator or CoordinatorLoadInProgress for a few
/// seconds) is asked again quietly, for up to [`COORDINATOR_WAIT`].
async fn refuse_external_resets(config: &Config) -> Result<()> {
    use crate::ops::replay::ReplayError;
    let config = config.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::ops::replay::external_resets_waiting_for_the_coordinator(COORDINATOR_WAIT, || {
            crate::ops::replay::check_external_resets(config.clone())
        })
    })
    .await?;
    match found {
        Ok(()) => Ok(()),
        Err(e @ ReplayError::ExternalReset { .. }) => Err(e.into()),
        // No broker answers: the connection's own line says so, with the
        // bootstrap address and the hint (the processor then waits).
        Err(e) if crate::observe::kafka_link::is_connection_failure(&e.to_string()) => {
            crate::observe::kafka_link::unreachable(&e.to_string());
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot check the group's committed offsets for a reset made outside orderly");
            Ok(())
        }
    }
}

/// Before anything is consumed: the cluster accepts the credentials and
/// the TLS certificate, and the principal holds every ACL `run` needs
/// (docs/operating.md, "A secured cluster"). A cluster that does not answer
/// is logged and passed over: the processor waits for it.
async fn refuse_what_security_refuses(config: &Config) -> Result<()> {
    let checked = config.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::kafka::acl::refuse_missing(&checked, Duration::from_secs(5))
    })
    .await?;
    match found {
        Ok(()) => {
            tracing::info!("acls: the principal may perform every operation orderly needs on the topics and the group");
            Ok(())
        }
        Err(e) if e.is_refusal() => Err(e.into()),
        Err(e @ crate::kafka::acl::AclError::Unsupported { .. }) => {
            tracing::info!("acls: {e}");
            Ok(())
        }
        Err(e) => {
            // The connection's own lines say the cluster is away (and
            // /readyz, from now on).
            if crate::observe::kafka_link::is_connection_failure(&e.to_string()) {
                crate::observe::kafka_link::unreachable(&e.to_string());
            }
            tracing::info!(error = %e, "acls: not checked now; starting, the processor waits for the cluster");
            Ok(())
        }
    }
}

/// How long a coordinator that is not ready yet is waited for at start-up.
const COORDINATOR_WAIT: Duration = Duration::from_secs(20);

/// `registry.schema_guard`: every registered writer schema of the input
/// subject must be readable before anything is consumed.
async fn schema_guard(
    config: &Config,
    registry: &Registry,
    reader: Option<&apache_avro::Schema>,
) -> Result<()> {
    use crate::config::SchemaGuard;
    let mode = config.registry.schema_guard;
    if mode == SchemaGuard::Off {
        return Ok(());
    }
    match crate::engine::codec::guard::guard(registry, &config.kafka.input_topic, reader).await {
        Ok(report) if report.incompatible.is_empty() => tracing::info!("schema guard: {}", report.summary()),
        Ok(report) if mode == SchemaGuard::Refuse => bail!(
            "schema guard: {}. Remove or fix those versions in the registry, or set registry.schema_guard = \"warn\" to \
             start anyway (their records are then dead-lettered)",
            report.summary()
        ),
        Ok(report) => tracing::warn!("schema guard: {} (registry.schema_guard = \"warn\": starting anyway)", report.summary()),
        Err(e) => tracing::warn!(error = %e, "schema guard: cannot list the input subject's versions; each schema is checked as its first record arrives"),
    }
    Ok(())
}

/// Starts listening for SIGTERM and SIGINT now; the future completes on
/// the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("Ctrl-C received");
        })
    }
}
