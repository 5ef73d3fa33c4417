//! Changes committed to the log and not yet to the store's B-tree, in memory, by table and
//! key, only the last change of each key kept: what a checkpoint writes, and what a read
//! lays over the B-tree's rows so that it sees every committed change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use redb::WriteTransaction;

use super::log::Change;

/// One table's changes.
#[derive(Default)]
struct TableChanges {
    /// Whether the table was dropped first: its stored rows are gone.
    dropped: bool,
    /// Key → its last value (`None`: removed).
    rows: BTreeMap<String, Option<Vec<u8>>>,
}

/// Changes by table, the last of each key.
#[derive(Default)]
pub(super) struct Overlay {
    tables: BTreeMap<Arc<str>, TableChanges>,
    /// About how many bytes it holds.
    bytes: usize,
}

impl Overlay {
    /// Takes in one change, after every change before it.
    pub(super) fn apply(&mut self, change: Change) {
        match change {
            Change::Set { table, key, value } => {
                self.bytes += key.len() + value.len();
                self.table(table).rows.insert(key, Some(value));
            }
            Change::Remove { table, key } => {
                self.bytes += key.len();
                self.table(table).rows.insert(key, None);
            }
            Change::Drop { table } => {
                let changes = self.table(table);
                changes.dropped = true;
                changes.rows.clear();
            }
        }
    }

    fn table(&mut self, name: Arc<str>) -> &mut TableChanges {
        self.tables.entry(name).or_default()
    }

    /// About how many bytes it holds (what a checkpoint will write, and more).
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether it holds no change.
    pub(super) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Writes every change into `txn`.
    pub(super) fn write(&self, txn: &WriteTransaction) -> Result<(), redb::Error> {
        for (name, changes) in &self.tables {
            if changes.dropped {
                txn.delete_table(super::writer::def(name))?;
            }
            if changes.rows.is_empty() {
                continue;
            }
            let mut table = txn.open_table(super::writer::def(name))?;
            for (key, value) in &changes.rows {
                match value {
                    Some(value) => {
                        table.insert(key.as_str(), value.as_slice())?;
                    }
                    None => {
                        table.remove(key.as_str())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Lays its changes to table `name` over `rows`.
    fn lay_over(&self, name: &str, rows: &mut BTreeMap<String, Vec<u8>>) {
        let Some(changes) = self.tables.get(name) else {
            return;
        };
        if changes.dropped {
            rows.clear();
        }
        for (key, value) in &changes.rows {
            match value {
                Some(value) => {
                    rows.insert(key.clone(), value.clone());
                }
                None => {
                    rows.remove(key);
                }
            }
        }
    }

    /// Lays its changes to the set of table names over `names`: a table dropped and
    /// given no row since is gone, a table given a row is there.
    fn lay_over_names(&self, names: &mut BTreeSet<String>) {
        for (name, changes) in &self.tables {
            if changes.rows.values().any(Option::is_some) {
                names.insert(name.to_string());
            } else if changes.dropped {
                names.remove(&**name);
            }
        }
    }
}

/// The changes not in the B-tree yet: those a checkpoint is writing now (`writing`), then
/// those since (`current`). Readers hold the lock while they read the B-tree too, so a
/// checkpoint's end never falls between the two.
#[derive(Default)]
pub(super) struct Pending {
    /// Handed to the checkpoint, with the last segment it covers.
    pub(super) writing: Option<(Arc<Overlay>, u64)>,
    /// Committed since.
    pub(super) current: Overlay,
}

impl Pending {
    /// Lays every pending change to table `name` over `rows` (the B-tree's).
    pub(super) fn lay_over(&self, name: &str, rows: &mut BTreeMap<String, Vec<u8>>) {
        if let Some((writing, _)) = &self.writing {
            writing.lay_over(name, rows);
        }
        self.current.lay_over(name, rows);
    }

    /// Lays every pending change to the tables there are over `names` (the B-tree's).
    pub(super) fn lay_over_names(&self, names: &mut BTreeSet<String>) {
        if let Some((writing, _)) = &self.writing {
            writing.lay_over_names(names);
        }
        self.current.lay_over_names(names);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(table: &str, key: &str, value: &str) -> Change {
        Change::Set {
            table: table.into(),
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_last_change_of_each_key_is_laid_over_the_stored_rows() {
        let mut stored: BTreeMap<String, Vec<u8>> = [("a", "0"), ("b", "0"), ("c", "0")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        let mut pending = Pending::default();
        let mut writing = Overlay::default();
        writing.apply(set("t", "a", "1"));
        writing.apply(Change::Remove {
            table: "t".into(),
            key: "b".into(),
        });
        pending.writing = Some((Arc::new(writing), 3));
        pending.current.apply(set("t", "a", "2"));
        pending.current.apply(set("t", "b", "2"));
        pending.current.apply(set("other", "x", "9"));
        let mut rows = stored.clone();
        pending.lay_over("t", &mut rows);
        let text = |rows: &BTreeMap<String, Vec<u8>>| -> Vec<(String, String)> {
            rows.iter()
                .map(|(k, v)| (k.clone(), String::from_utf8(v.clone()).unwrap()))
                .collect()
        };
        assert_eq!(
            text(&rows),
            [("a", "2"), ("b", "2"), ("c", "0")].map(|(k, v)| (k.to_string(), v.to_string()))
        );

        // A drop takes the stored rows; rows set after it stay.
        pending.current.apply(Change::Drop { table: "t".into() });
        pending.current.apply(set("t", "c", "3"));
        pending.lay_over("t", &mut stored);
        assert_eq!(text(&stored), [("c".to_string(), "3".to_string())]);
        let mut names = BTreeSet::from(["t".to_string(), "gone".to_string()]);
        pending.current.apply(Change::Drop {
            table: "gone".into(),
        });
        pending.lay_over_names(&mut names);
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["other".to_string(), "t".to_string()]
        );
    }
}
