//! The named workloads of issue 52 (`--workload NAME`): each sets the
//! orders, the events and how they spread, and says what production stream
//! it stands for. It sets `--orders`, `--events` and `--shape`, and is
//! refused beside them.

use orderly::testkit::orders::workload::Shape;

/// A named workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 10,000 orders receiving 1,000 events each, spread over the whole
    /// topic (the README's first table): a small set of long-lived entities
    /// (accounts, stock items) every event of which lands on a state
    /// already in memory. Long enough for a steady middle.
    Hot,
    /// 1,000,000 orders of 6 events each, an order's events within a short
    /// window of its start: an order stream, new orders every moment, each
    /// living a few minutes, the key space growing for ever.
    Lifecycle,
    /// `lifecycle` with 10,000,000 orders: a state ten times the memory
    /// budget.
    #[value(name = "lifecycle-10m")]
    Lifecycle10m,
    /// 400,000 orders of 5 events each, shuffled over the whole topic: a
    /// fixed key space receiving events in no order (a late or replayed
    /// stream, a periodic update of every entity).
    Uniform,
    /// `uniform` with 4,000,000 orders.
    #[value(name = "uniform-4m")]
    Uniform4m,
    /// 1,000,000 orders of one event each: every event a key never seen
    /// (an append-only stream keyed by event, a first-sight filter).
    Distinct,
}

impl Workload {
    /// Orders, planned events (before duplicates and poison) and shape.
    pub fn size(self) -> (usize, usize, Shape) {
        match self {
            Workload::Hot => (10_000, 10_000_000, Shape::Interleaved),
            Workload::Lifecycle => (1_000_000, 6_000_000, Shape::Clustered),
            Workload::Lifecycle10m => (10_000_000, 60_000_000, Shape::Clustered),
            Workload::Uniform => (400_000, 2_000_000, Shape::Interleaved),
            Workload::Uniform4m => (4_000_000, 20_000_000, Shape::Interleaved),
            Workload::Distinct => (1_000_000, 1_000_000, Shape::Interleaved),
        }
    }
}
