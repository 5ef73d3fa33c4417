//! Which plugin instance a worker's call runs in, by the handler's `instance:` setting.
//!
//! - `per-event` (the default): a fresh instance for every call, taken from the pool and
//!   returned to it when the call ends. Nothing one event leaves in the plugin's memory or
//!   globals reaches the next.
//! - `reuse`: each worker keeps the instance it made and calls `handle` on it again for its
//!   next event, skipping instantiation and `init` (see BENCHMARKS.md, "Plugin call cost").
//!   The instance is dropped, and the next event gets a fresh one, when a call fails (an
//!   error, a trap, a timeout: whatever state the plugin was in is not trusted), and when
//!   the plugin version or the handler's host context (caches, writes: set anew by every
//!   config reload) changes. A handler with a `shadow:` records the plugin's writes per
//!   call, in a context of the call's own, so its workers get a fresh instance every time. What it
//!   gives up: the plugin may carry state from one event to the next (differently per
//!   worker, and lost on restart), memory a call grew stays charged to later calls, and
//!   each worker holds its pool slot while it lives.

use std::sync::Arc;

use crate::config::InstanceMode;
use crate::plugin::{
    self, CallLimits, Event, HostContext, ItemOutcome, Outcome, Plugin, PluginInstance,
};

/// One worker's instance for its calls.
pub(super) struct Instances {
    mode: InstanceMode,
    kept: Option<Kept>,
}

/// An instance kept across calls, with what it was made from.
struct Kept {
    plugin: Arc<Plugin>,
    context: Arc<HostContext>,
    instance: PluginInstance,
}

impl Instances {
    /// A worker's instances under `mode`.
    pub(super) fn new(mode: InstanceMode) -> Self {
        Self { mode, kept: None }
    }

    /// Calls `plugin` with `event`, in a fresh instance or the kept one.
    pub(super) async fn call(
        &mut self,
        plugin: &Arc<Plugin>,
        context: &Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
        (event, trace): (&Event, Option<crate::traces::CallTrace>),
    ) -> plugin::Result<Outcome> {
        if self.mode == InstanceMode::PerEvent {
            return plugin
                .call_traced(context, limits, config_json, event, trace)
                .await;
        }
        let kept = self.kept(plugin, context, limits, config_json).await?;
        let result = kept.handle_traced(event, trace).await;
        if result.is_err() {
            self.kept = None;
        }
        result
    }

    /// Calls `plugin`'s `handle-batch` with `events`, in a fresh instance or the kept one.
    pub(super) async fn call_batch(
        &mut self,
        plugin: &Arc<Plugin>,
        context: &Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
        events: &[Event],
    ) -> plugin::Result<Vec<ItemOutcome>> {
        if self.mode == InstanceMode::PerEvent {
            let mut instance = plugin
                .instantiate_in(context.clone(), limits, config_json)
                .await?;
            return instance.handle_batch(events).await;
        }
        let kept = self.kept(plugin, context, limits, config_json).await?;
        let result = kept.handle_batch(events).await;
        if result.is_err() {
            self.kept = None;
        }
        result
    }

    /// The kept instance, made anew (with `init`) unless it is of `plugin` and `context`.
    async fn kept(
        &mut self,
        plugin: &Arc<Plugin>,
        context: &Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
    ) -> plugin::Result<&mut PluginInstance> {
        let current = self
            .kept
            .as_ref()
            .is_some_and(|k| Arc::ptr_eq(&k.plugin, plugin) && Arc::ptr_eq(&k.context, context));
        if !current {
            // The old instance goes back to the pool before a new one is taken.
            self.kept = None;
            let instance = plugin
                .instantiate_in(context.clone(), limits, config_json)
                .await?;
            self.kept = Some(Kept {
                plugin: plugin.clone(),
                context: context.clone(),
                instance,
            });
        }
        Ok(&mut self.kept.as_mut().expect("kept above").instance)
    }
}
