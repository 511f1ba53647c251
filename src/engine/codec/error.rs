//! Why a record does not decode: poison (dead-lettered) or transient
//! (retried). At the bottom of the tree: entities return these.

/// Why a record is poison. The set is small and fixed: it labels DLQ headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonKind {
    /// The record has no value.
    EmptyPayload,
    /// The value does not start with the wire format's magic byte 0.
    BadMagicByte,
    /// The registry does not know the value's schema id.
    UnknownSchema,
    /// The writer schema does not parse, or cannot be read with the
    /// entity's reader.
    BadSchema,
    /// The value does not decode with its writer schema (shorter than the
    /// header, a body that does not match, trailing bytes).
    Undecodable,
    /// The value decodes but breaks a rule every event obeys (an empty key
    /// or event id, a version below 1, a missing field).
    Invalid,
}

impl PoisonKind {
    /// The kind's label in dead-letter headers and metrics (`"bad_schema"`,
    /// ...).
    pub fn as_str(self) -> &'static str {
        match self {
            PoisonKind::EmptyPayload => "empty_payload",
            PoisonKind::BadMagicByte => "bad_magic_byte",
            PoisonKind::UnknownSchema => "unknown_schema",
            PoisonKind::BadSchema => "bad_schema",
            PoisonKind::Undecodable => "undecodable",
            PoisonKind::Invalid => "invalid",
        }
    }
}

/// Why an entity could not read a record: poison (dead-lettered) or
/// transient (retried).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Deterministic: this record will never decode. Dead-letter it.
    #[error("{}: {message}", kind.as_str())]
    Poison {
        /// Which kind of poison (a dead-letter header).
        kind: PoisonKind,
        /// What is wrong with the record.
        message: String,
    },
    /// The registry is unreachable: retry later, do not move past the record.
    #[error("transient: {0}")]
    Transient(String),
}

impl DecodeError {
    /// A record that can never be decoded: it is dead-lettered.
    pub fn poison(kind: PoisonKind, message: impl Into<String>) -> Self {
        DecodeError::Poison {
            kind,
            message: message.into(),
        }
    }
}
