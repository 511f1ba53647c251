//! The built-in entities: implementations of [`crate::engine::entity::Entity`].

pub(crate) mod latest;
pub(crate) mod orders;
pub(crate) mod stock;

/// The reader schema of the entity `config` names (`None`: records are read
/// with their writer's schema), for the checks that run without the entity
/// (`config check`).
pub(crate) fn reader_schema_for(
    config: &crate::config::EntityConfig,
) -> Option<&'static apache_avro::Schema> {
    use crate::config::EntityKind;
    match config.kind {
        EntityKind::Orders => Some(crate::domains::orders::codec::reader_schema()),
        EntityKind::Stock => Some(stock::event_schema()),
        EntityKind::Latest => None,
    }
}
