//! `--feature-gates`: the Kubernetes feature gates the simulator plays, written as
//! kube-apiserver takes them (`Name=true,Other=false`).

/// The feature gates the simulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `ShardedListAndWatch` (KEP-5866): honour `shardSelector`. Default off.
    pub sharded_list_and_watch: bool,
    /// `WatchList` (KEP-3157): serve streaming lists (`sendInitialEvents` on a watch).
    /// Default on; off, such a watch is refused as invalid, as an API server without the
    /// feature refuses it.
    pub watch_list: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            sharded_list_and_watch: false,
            watch_list: true,
        }
    }
}

impl FeatureGates {
    /// Reads `Name=bool` pairs separated by commas; an unknown gate or a value that is not
    /// `true` or `false` is an error naming it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?}: expected NAME=true or NAME=false"))?;
            let value = match value.trim() {
                "true" => true,
                "false" => false,
                other => return Err(format!("{name}: {other:?} is not true or false")),
            };
            match name.trim() {
                "ShardedListAndWatch" => gates.sharded_list_and_watch = value,
                "WatchList" => gates.watch_list = value,
                other => {
                    return Err(format!(
                        "unknown feature gate {other:?}: the simulator knows ShardedListAndWatch and WatchList"
                    ));
                }
            }
        }
        Ok(gates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_are_read_by_name_and_unknown_ones_refused() {
        assert!(
            FeatureGates::parse("ShardedListAndWatch=true")
                .unwrap()
                .sharded_list_and_watch
        );
        assert!(
            !FeatureGates::parse("ShardedListAndWatch=false")
                .unwrap()
                .sharded_list_and_watch
        );
        assert!(FeatureGates::parse("").unwrap().watch_list);
        assert!(!FeatureGates::parse("WatchList=false").unwrap().watch_list);
        assert!(
            FeatureGates::parse("Sharded=true")
                .unwrap_err()
                .contains("unknown feature gate")
        );
        assert!(
            FeatureGates::parse("ShardedListAndWatch=yes")
                .unwrap_err()
                .contains("not true or false")
        );
        assert!(
            FeatureGates::parse("ShardedListAndWatch")
                .unwrap_err()
                .contains("expected NAME=true")
        );
    }
}
