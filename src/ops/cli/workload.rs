//! The generator's flags, shared by `demo` and `produce`.

use anyhow::{bail, Result};
use clap::Args;

use crate::domains::orders::workload::WorkloadSpec;

#[derive(Args, Clone)]
pub(super) struct WorkloadArgs {
    /// Number of orders (each 1 to 4 events); with entity.kind = "stock" or demo --entity stock, of SKUs (each 5 to
    /// 39 events)
    #[arg(long, default_value_t = 5_000)]
    pub(super) orders: usize,
    /// Chance an event is sent twice
    #[arg(long, default_value_t = 0.05)]
    duplicate_rate: f64,
    /// Chance an event is swapped with its order's (or SKU's) next event
    #[arg(long, default_value_t = 0.02)]
    reorder_rate: f64,
    /// Poison records per good record
    #[arg(long, default_value_t = 0.002)]
    poison_rate: f64,
    /// Share of events written with the v1 schema
    #[arg(long, default_value_t = 0.3)]
    v1_share: f64,
    /// Seed of the generator: the same seed gives the same records
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Prefix of the order ids (<PREFIX>-00000001 and on), default order-s<SEED>: runs with different seeds never
    /// share an order, so a second run against the same topic adds new orders instead of stale events; give the
    /// same prefix and seed to re-send the same orders
    #[arg(long, value_name = "PREFIX")]
    order_prefix: Option<String>,
}

impl WorkloadArgs {
    /// The stock generator's workload: `--orders` SKUs, `--duplicate-rate`,
    /// `--reorder-rate`, `--poison-rate`, `--seed`, `--order-prefix` as the
    /// SKU prefix (default sku-s<SEED>).
    pub(super) fn stock_spec(&self) -> Result<crate::domains::stock::workload::StockSpec> {
        let checked = self.spec()?;
        Ok(crate::domains::stock::workload::StockSpec {
            skus: checked.orders,
            seed: checked.seed,
            duplicate_rate: checked.duplicate_rate,
            reorder_rate: checked.reorder_rate,
            poison_rate: checked.poison_rate,
            sku_prefix: self
                .order_prefix
                .clone()
                .unwrap_or_else(|| format!("sku-s{}", checked.seed)),
        })
    }

    pub(super) fn spec(&self) -> Result<WorkloadSpec> {
        for (name, rate) in [
            ("--duplicate-rate", self.duplicate_rate),
            ("--reorder-rate", self.reorder_rate),
            ("--poison-rate", self.poison_rate),
            ("--v1-share", self.v1_share),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                bail!("{name} must be between 0 and 1, got {rate}");
            }
        }
        if self.orders == 0 {
            bail!("--orders must be at least 1");
        }
        Ok(WorkloadSpec {
            orders: self.orders,
            seed: self.seed,
            duplicate_rate: self.duplicate_rate,
            reorder_rate: self.reorder_rate,
            poison_rate: self.poison_rate,
            v1_share: self.v1_share,
            order_prefix: self
                .order_prefix
                .clone()
                .unwrap_or_else(|| format!("order-s{}", self.seed)),
            ..Default::default()
        })
    }
}
