//! The bounds a config is held to: what the plugin engine can give a handler, and how much
//! YAML a config may be. Validation reports a value beyond them at its place in the file,
//! so `check` refuses what `run` could not start.
//!
//! # Decision: bounds as constants here, not read from the engine
//!
//! The config imports no other module, so the engine's limits are restated here, each
//! with where it comes from: wasmtime's default memory reservation (4 GiB on a 64-bit
//! host: the pooling allocator refuses a larger memory at start) and the instance pool the
//! daemon sizes from the config (`plugin::host`: one slot per worker, each reserving
//! address space for two memories).

use std::time::Duration;

use super::units::HumanDuration;

/// The largest config file read, in bytes. A config is a few kilobytes; anything near this
/// is a mistake (or an attack), and refusing it costs nothing.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The deepest nesting of YAML mappings and sequences a config may have.
pub const MAX_YAML_DEPTH: usize = 32;

/// The most values (mappings, sequences and scalars) a config may have.
pub const MAX_YAML_NODES: usize = 100_000;

/// The most values a config's aliases (`*name`) may expand to, all aliases together.
/// Anchors shared between handlers stay far below this; a "billion laughs" document
/// reaches it at once.
pub const MAX_YAML_ALIAS_EXPANSION: usize = 10_000;

/// The most aliases (`*name`) and anchors (`&name`) a config may have, each.
pub const MAX_YAML_ALIASES: usize = 1_000;

/// One WebAssembly page (64 KiB): the unit a plugin's memory grows by.
pub const WASM_PAGE_BYTES: u64 = 64 << 10;

/// The smallest `memory` a handler may have: one WebAssembly page.
pub const MIN_MEMORY: u64 = WASM_PAGE_BYTES;

/// The largest `memory` a handler may have: 4 GiB, all a 32-bit WebAssembly memory can
/// address (65,536 pages), and wasmtime's default memory reservation on a 64-bit host,
/// beyond which the pooling allocator refuses to start.
pub const MAX_MEMORY: u64 = 4 << 30;

/// The most workers all handlers together may have (the sum of their `concurrency`). Each
/// worker is a slot in the plugin instance pool, and each slot reserves address space for
/// two memories of up to 4 GiB (see `plugin::host`): 1,024 slots take 8 TiB of the
/// 128 TiB a 64-bit process can map, leaving room for several pools (tests, `check`).
pub const MAX_WORKERS: usize = 1024;

/// The longest `timeout` a handler call may have. A call holds a worker for as long as it
/// runs; a deadline of hours is a unit mistake, and an unbounded one overflows the clock.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The shortest `log_line_max`: a line cut shorter than this says too little to be of use,
/// and the marker saying how much was cut is about as long.
pub const MIN_LOG_LINE: u64 = 64;

/// A handler value beyond what the plugin engine can give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// `concurrency: 0`.
    #[error("concurrency must be at least 1")]
    NoWorkers,
    /// More workers than the instance pool can hold.
    #[error(
        "concurrency {0} is more than the plugin instance pool can hold: at most {MAX_WORKERS} workers"
    )]
    TooManyWorkers(usize),
    /// `timeout: 0s`.
    #[error("timeout must be longer than 0s: a call needs time to run")]
    NoTime,
    /// A timeout beyond [`MAX_TIMEOUT`].
    #[error("timeout {} is longer than a plugin call may take: at most {}", HumanDuration(*.0), HumanDuration(MAX_TIMEOUT))]
    TooLong(Duration),
    /// Less memory than one WebAssembly page.
    #[error("memory must be at least 64Ki (one WebAssembly page), not {0} bytes")]
    TooLittleMemory(u64),
    /// More memory than a plugin instance can have.
    #[error(
        "memory of {0} bytes is more than a plugin instance can address: at most 4Gi (4294967296 bytes)"
    )]
    TooMuchMemory(u64),
    /// A `log_line_max` below [`MIN_LOG_LINE`].
    #[error(
        "log_line_max must be at least {MIN_LOG_LINE} bytes, not {0}: a line cut shorter says too little"
    )]
    LogLineTooShort(u64),
    /// `qps` negative or not a number.
    #[error("qps must be a non-negative number (0 turns the retry bucket off)")]
    BadQps,
}

/// Checks a handler's `concurrency`.
pub fn check_concurrency(workers: usize) -> Result<usize, LimitError> {
    match workers {
        0 => Err(LimitError::NoWorkers),
        n if n > MAX_WORKERS => Err(LimitError::TooManyWorkers(n)),
        n => Ok(n),
    }
}

/// Checks a handler's `timeout`.
pub fn check_timeout(timeout: Duration) -> Result<Duration, LimitError> {
    if timeout.is_zero() {
        Err(LimitError::NoTime)
    } else if timeout > MAX_TIMEOUT {
        Err(LimitError::TooLong(timeout))
    } else {
        Ok(timeout)
    }
}

/// Checks a handler's `memory`.
pub fn check_memory(bytes: u64) -> Result<u64, LimitError> {
    if bytes < MIN_MEMORY {
        Err(LimitError::TooLittleMemory(bytes))
    } else if bytes > MAX_MEMORY {
        Err(LimitError::TooMuchMemory(bytes))
    } else {
        Ok(bytes)
    }
}

/// Checks a handler's `log_line_max`.
pub fn check_log_line(bytes: u64) -> Result<u64, LimitError> {
    if bytes < MIN_LOG_LINE {
        Err(LimitError::LogLineTooShort(bytes))
    } else {
        Ok(bytes)
    }
}

/// Checks a handler's `qps`.
pub fn check_qps(qps: f64) -> Result<f64, LimitError> {
    if qps.is_finite() && qps >= 0.0 {
        Ok(qps)
    } else {
        Err(LimitError::BadQps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_values_are_held_to_what_the_engine_can_give() {
        assert_eq!(check_concurrency(0), Err(LimitError::NoWorkers));
        assert_eq!(check_concurrency(MAX_WORKERS), Ok(MAX_WORKERS));
        assert!(check_concurrency(100_000).is_err());
        assert_eq!(check_timeout(Duration::ZERO), Err(LimitError::NoTime));
        assert!(check_timeout(Duration::from_millis(1)).is_ok());
        assert!(check_timeout(MAX_TIMEOUT + Duration::from_secs(1)).is_err());
        assert!(check_memory(0).is_err());
        assert!(check_memory(MIN_MEMORY).is_ok());
        assert!(check_memory(MAX_MEMORY).is_ok());
        assert!(check_memory(1000 << 30).is_err());
        assert!(check_qps(f64::NAN).is_err());
        assert!(check_qps(-1.0).is_err());
        assert_eq!(check_qps(0.0), Ok(0.0));
        assert!(check_log_line(0).is_err());
        assert_eq!(check_log_line(MIN_LOG_LINE), Ok(MIN_LOG_LINE));
    }
}
