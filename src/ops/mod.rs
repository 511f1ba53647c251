//! The operator surface: the command line ([`cli`]), the HTTP endpoint
//! ([`http`]), `demo`, `replay`, `dlq` ([`redrive`]), `config check`
//! ([`preflight`]) and producing a workload ([`load`]).

pub mod cli;
pub mod demo;
pub mod http;
pub mod load;
pub mod preflight;
pub mod redrive;
pub mod replay;
