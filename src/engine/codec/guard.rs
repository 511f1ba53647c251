//! The schema guard: before `run` consumes anything, every writer schema
//! registered under the input topic's subject (`<input_topic>-value`) must
//! resolve against orderly's reader schema. An incompatible version (a
//! producer registered a breaking change the registry's compatibility
//! setting let through) is named at start-up, instead of its records being
//! dead-lettered one by one as they arrive.

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;

use crate::registry::{RegisteredVersion, Registry, RegistryError};

/// A registered version orderly cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incompatible {
    pub version: u32,
    pub id: u32,
    pub(crate) problem: String,
}

/// What the guard found under one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardReport {
    pub subject: String,
    /// Versions registered (0: the subject is not registered yet).
    pub versions: usize,
    /// Their schema ids, oldest version first.
    pub ids: Vec<u32>,
    pub incompatible: Vec<Incompatible>,
}

/// The versions of `versions` that `reader` cannot read (`None`: an entity
/// that reads each record with its writer's schema, so only a version that
/// does not parse is one). Pure.
pub(crate) fn check_against(
    versions: &[RegisteredVersion],
    reader: Option<&Schema>,
) -> Vec<Incompatible> {
    versions
        .iter()
        .filter_map(|v| {
            let problem = match Schema::parse_str(&v.schema) {
                Err(e) => format!("it does not parse as Avro: {e}"),
                Ok(writer) => match reader.map(|r| SchemaCompatibility::can_read(&writer, r)) {
                    None | Some(Ok(_)) => return None,
                    Some(Err(e)) => format!("orderly's reader schema cannot read it: {e}"),
                },
            };
            Some(Incompatible {
                version: v.version,
                id: v.id,
                problem,
            })
        })
        .collect()
}

/// Fetches every version of `<input_topic>-value` and checks each against
/// `reader` (see [`check_against`]).
pub(crate) async fn guard(
    registry: &Registry,
    input_topic: &str,
    reader: Option<&Schema>,
) -> Result<GuardReport, RegistryError> {
    let subject = format!("{input_topic}-value");
    let versions = registry.versions(&subject).await?;
    Ok(GuardReport {
        incompatible: check_against(&versions, reader),
        ids: versions.iter().map(|v| v.id).collect(),
        versions: versions.len(),
        subject,
    })
}

impl GuardReport {
    /// One line: how many versions, and each incompatible one.
    pub(crate) fn summary(&self) -> String {
        if self.versions == 0 {
            return format!(
                "{}: no writer schema registered yet (producers register it)",
                self.subject
            );
        }
        if self.incompatible.is_empty() {
            let ids: Vec<String> = self.ids.iter().map(u32::to_string).collect();
            return format!(
                "{}: all {} version(s) readable (schema ids {})",
                self.subject,
                self.versions,
                ids.join(", ")
            );
        }
        let named: Vec<String> = self
            .incompatible
            .iter()
            .map(|i| format!("version {} (schema id {}): {}", i.version, i.id, i.problem))
            .collect();
        format!(
            "{}: {} of {} version(s) cannot be read, their records would be dead-lettered: {}",
            self.subject,
            self.incompatible.len(),
            self.versions,
            named.join("; ")
        )
    }
}
