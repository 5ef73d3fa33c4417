//! A call's resource limits: wasmtime's [`StoreLimits`] with a memory cap whose trap says
//! what the cap is and what the plugin asked for.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use super::mib;

/// The resource limits of one call: [`StoreLimits`]' defaults, and a memory cap whose trap
/// names the cap and what the plugin asked for.
pub(super) struct CallLimiter {
    memory: usize,
    defaults: StoreLimits,
}

impl CallLimiter {
    pub(super) fn new(memory: u64) -> Self {
        let memory = usize::try_from(memory).unwrap_or(usize::MAX);
        Self {
            memory,
            defaults: StoreLimitsBuilder::new()
                .memory_size(memory)
                .trap_on_grow_failure(true)
                .build(),
        }
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory {
            wasmtime::bail!(
                "memory cap of {} exceeded: the plugin asked to grow its memory from {} to {}",
                mib(self.memory as u64),
                mib(current as u64),
                mib(desired as u64)
            );
        }
        self.defaults.memory_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.defaults.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.defaults.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.defaults.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.defaults.instances()
    }

    fn tables(&self) -> usize {
        self.defaults.tables()
    }

    fn memories(&self) -> usize {
        self.defaults.memories()
    }
}
