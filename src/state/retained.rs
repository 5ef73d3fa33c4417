//! The records of a route not compared yet with the objects they describe: at a restart,
//! every record of the last run; in sharded mode, afterwards, the records of objects outside
//! this replica's ranges (kept from the last run, or of objects handed over to another
//! replica), until a range holding them comes back.
//!
//! Why records outside the ranges are kept rather than dropped or reported: the object was
//! not deleted, another replica owns it now, and if its range comes back the record still
//! tells what this replica last delivered of it (the same content: nothing; other content:
//! `updated`; gone: `deleted`) instead of a blind `added`. They are not aged out: a record
//! is a few dozen bytes, and dropping one would turn a deletion made while the range was
//! away into nothing and an unchanged object into a repeated `added`.

use std::collections::HashMap;

use super::RouteRecord;

/// Records waiting to be compared, by object key; see the module docs.
#[derive(Debug, Default)]
pub struct Retained {
    records: HashMap<String, RouteRecord>,
}

impl Retained {
    /// Records to compare: what a route delivered in the last run.
    pub fn new(records: HashMap<String, RouteRecord>) -> Self {
        Self { records }
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// How many records wait.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// The record of the object under `key`, if one waits: it is compared now.
    pub fn take(&mut self, key: &str) -> Option<RouteRecord> {
        self.records.remove(key)
    }

    /// Keeps `record` of the object under `key` until its range comes back (an object
    /// handed over to another replica), replacing any record kept before.
    pub fn keep(&mut self, key: &str, record: RouteRecord) {
        self.records.insert(key.to_string(), record);
    }

    /// Takes every record `owned` says is in this replica's share now, sorted by key: once
    /// every informer has listed that share, these objects are gone. The others stay.
    pub fn take_owned(
        &mut self,
        owned: impl Fn(&str, &RouteRecord) -> bool,
    ) -> Vec<(String, RouteRecord)> {
        let keys: Vec<String> = self
            .records
            .iter()
            .filter(|(key, record)| owned(key, record))
            .map(|(key, _)| key.clone())
            .collect();
        let mut taken: Vec<(String, RouteRecord)> = keys
            .into_iter()
            .filter_map(|key| self.records.remove_entry(&key))
            .collect();
        taken.sort_by(|a, b| a.0.cmp(&b.0));
        taken
    }

    /// The keys of the records waiting, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.records.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }
}
