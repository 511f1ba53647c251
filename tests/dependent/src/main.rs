//! `tickets`: orderly's command line (`run`, `replay`, `dlq`, `state`,
//! `config`) and HTTP endpoint for support tickets.

// jemalloc, with the options orderly runs with (orderly's default feature).
orderly::allocator!();

fn main() -> std::process::ExitCode {
    match tickets::Tickets::new() {
        Ok(entity) => orderly::main_with(entity),
        Err(e) => {
            eprintln!("error: the ticket schema does not parse: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
