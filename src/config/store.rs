//! `[store]`: where the sled store lives, its cache, and how long the inbox
//! remembers event ids.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub inbox_retention: HumanDuration,
    pub cache_capacity_mb: u64,
}
