//! Plugins carried in the binary: the shipped sinks (`plugins/sinks`), named
//! `builtin:webhook`, `builtin:slack`, `builtin:cloudevents` and `builtin:aws` in a handler's `plugin:`, so
//! the recipes that use them run from an installed binary with nothing built.
//!
//! # Decision: built components committed beside this file, checked against their sources
//!
//! The binary must carry the components without making `cargo build` (or `cargo install`)
//! need the wasm32-wasip2 target and a second cargo build: a build script that built them
//! would, and one that took them only when present would leave them out of an install from
//! a fresh clone. So the components are committed in `builtin/` with the digest of the
//! sources they were built from (`sources.sha256`, written by
//! `scripts/update-builtin-plugins.sh`), and a test fails when the sources no longer match
//! it. The digest, not the bytes: a component built elsewhere differs in paths and
//! versions the compiler records, though it does the same.

use sha2::{Digest, Sha256};

use super::loader::PluginFile;

/// What a handler's `plugin:` starts with to name a plugin carried in the binary.
pub const PREFIX: &str = "builtin:";

/// The plugins carried in the binary, by name.
const PLUGINS: &[(&str, &[u8])] = &[
    ("webhook", include_bytes!("builtin/webhook.wasm")),
    ("slack", include_bytes!("builtin/slack.wasm")),
    ("cloudevents", include_bytes!("builtin/cloudevents.wasm")),
    ("alertmanager", include_bytes!("builtin/alertmanager.wasm")),
    ("rabbitmq", include_bytes!("builtin/rabbitmq.wasm")),
    ("otlp", include_bytes!("builtin/otlp.wasm")),
    ("pagerduty", include_bytes!("builtin/pagerduty.wasm")),
    ("opsgenie", include_bytes!("builtin/opsgenie.wasm")),
    ("teams", include_bytes!("builtin/teams.wasm")),
    ("discord", include_bytes!("builtin/discord.wasm")),
    ("aws", include_bytes!("builtin/aws.wasm")),
    ("loki", include_bytes!("builtin/loki.wasm")),
    (
        "elasticsearch",
        include_bytes!("builtin/elasticsearch.wasm"),
    ),
];

/// The digest of the sources the carried plugins were built from (see the module docs).
pub const SOURCES_DIGEST: &str = include_str!("builtin/sources.sha256");

/// Whether `plugin` names a plugin carried in the binary (`builtin:NAME`).
pub fn is_builtin(plugin: &str) -> bool {
    plugin.starts_with(PREFIX)
}

/// The names of the plugins carried in the binary, as a config names them.
pub fn names() -> Vec<String> {
    PLUGINS
        .iter()
        .map(|(name, _)| format!("{PREFIX}{name}"))
        .collect()
}

/// The component `plugin` (`builtin:NAME`) names, if the binary carries one by that name.
pub fn component(plugin: &str) -> Option<PluginFile> {
    let name = plugin.strip_prefix(PREFIX)?;
    let (_, bytes) = PLUGINS.iter().find(|(n, _)| *n == name)?;
    let digest = Sha256::digest(bytes);
    Some(PluginFile {
        bytes: bytes.to_vec(),
        sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// Why `plugin` names no carried plugin, naming those there are.
pub fn unknown(plugin: &str) -> String {
    format!(
        "there is no built-in plugin {plugin:?}; the binary carries {}",
        names().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_carried_plugin_is_a_component_and_an_unknown_name_none() {
        for name in names() {
            let file = component(&name).unwrap();
            // The component binary format: `\0asm`, then the component layer's version.
            assert_eq!(&file.bytes[..4], b"\0asm", "{name}");
            assert_eq!(
                file.bytes[6..8],
                [1, 0],
                "{name} is a component, not a module"
            );
            assert_eq!(file.sha256.len(), 64);
        }
        assert!(component("builtin:webhok").is_none());
        assert!(component("webhook").is_none());
        assert_eq!(
            unknown("builtin:webhok"),
            "there is no built-in plugin \"builtin:webhok\"; the binary carries builtin:webhook, builtin:slack, builtin:cloudevents, builtin:alertmanager, builtin:rabbitmq, builtin:otlp, builtin:pagerduty, builtin:opsgenie, builtin:teams, builtin:discord, builtin:aws, builtin:loki, builtin:elasticsearch"
        );
    }
}
