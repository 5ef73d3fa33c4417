//! Resuming a watch from the last version seen, after checking that the server has not gone
//! behind it (see the module above for why).

use kube::api::{Api, DynamicObject, ListParams};

use super::{Error, Event, Selectors, State, WatchStream, sharded};

/// Opens the watch from `rv`, first checking (when `check`) that the server still has it.
pub(super) async fn resume(
    api: &Api<DynamicObject>,
    selectors: &Selectors,
    rv: String,
    check: bool,
) -> (Option<Result<Event, Error>>, State) {
    if check {
        match api.list(&ListParams::default().limit(1)).await {
            Err(source) => return (Some(Err(Error::Check(source))), State::Resume { rv, check }),
            Ok(list) => {
                let server = list.metadata.resource_version.unwrap_or_default();
                if is_behind(&server, &rv) {
                    let behind = Error::ServerBehind { server, seen: rv };
                    return (Some(Err(behind)), State::Empty);
                }
            }
        }
    }
    match sharded::watch(
        api,
        &selectors.watch_params(),
        &rv,
        selectors.shard.as_ref(),
    )
    .await
    {
        Ok(stream) => (
            Some(Ok(Event::Watching { rv: rv.clone() })),
            State::Watching {
                rv,
                stream: WatchStream {
                    body: Box::pin(stream),
                    line: Vec::new(),
                },
            },
        ),
        Err(source) => {
            let error = Error::WatchStart(source);
            let next = if error.relists() {
                State::Empty
            } else {
                State::Resume { rv, check: true }
            };
            (Some(Err(error)), next)
        }
    }
}

/// Whether the server's version `server` is older than `seen`. Versions that are not numbers
/// cannot be compared: then it is not.
fn is_behind(server: &str, seen: &str) -> bool {
    match (server.parse::<u64>(), seen.parse::<u64>()) {
        (Ok(server), Ok(seen)) => server < seen,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_behind_only_when_both_versions_are_numbers_and_its_is_smaller() {
        assert!(is_behind("71", "15437"));
        assert!(!is_behind("15437", "15437"));
        assert!(!is_behind("20000", "15437"));
        assert!(!is_behind("", "15437"));
        assert!(!is_behind("71", "opaque-token"));
    }
}
