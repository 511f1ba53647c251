//! Why a record does not decode: poison (dead-lettered) or transient
//! (retried). At the bottom of the tree: entities return these.

/// Why a record is poison. The set is small and fixed: it labels DLQ headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoisonKind {
    EmptyPayload,
    BadMagicByte,
    UnknownSchema,
    BadSchema,
    Undecodable,
    Invalid,
}

impl PoisonKind {
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

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Deterministic: this record will never decode. Dead-letter it.
    #[error("{}: {message}", kind.as_str())]
    Poison { kind: PoisonKind, message: String },
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
