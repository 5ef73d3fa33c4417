//! Host bindings generated from the WIT package in `plugins/wit` (`switchyard:plugin`).

// Generated code: its docs are the WIT file's.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "plugins/wit",
    world: "handler",
    imports: { default: async | trappable },
    exports: { default: async },
});
