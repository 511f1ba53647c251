//! The built-in entities: implementations of [`crate::entity::Entity`].

pub mod orders;
pub mod stock;
