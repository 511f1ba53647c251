//! The operator surface: the command line ([`cli`]), the HTTP endpoint
//! ([`http`]), `demo`, `replay`, `dlq` ([`redrive`]), `config check`
//! ([`preflight`]) and producing a workload ([`load`]).

pub(crate) mod cli;
pub(crate) mod demo;
pub(crate) mod explain;
pub(crate) mod http;
pub(crate) mod load;
pub(crate) mod preflight;
pub(crate) mod program;
pub(crate) mod redrive;
pub(crate) mod repair;
pub(crate) mod replay;
