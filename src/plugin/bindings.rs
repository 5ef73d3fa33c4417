//! Host bindings generated from the WIT package in `plugins/wit` (`switchyard:plugin`). The
//! `wasi:http` and `wasi:io` interfaces the world imports are wasmtime-wasi-http's and
//! wasmtime-wasi's own bindings, added to the linker beside these.

// Generated code: its docs are the WIT file's.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "plugins/wit",
    world: "handler",
    imports: { default: async | trappable },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
    require_store_data_send: true,
});
