//! Lists in pages: each page asked for with the last one's continue token, its objects
//! reported one by one, and the list's end once the last page is out.

use std::collections::VecDeque;

use super::{Error, Event, State, With, sharded};
use crate::informer::wire::{self, Decoder, Received};

/// The list's end when the last page has been reported, else the next page.
pub(super) async fn next_page(
    with: &mut With,
    continue_token: Option<String>,
    rv: Option<String>,
) -> (Option<Result<Event, Error>>, State) {
    match (continue_token, rv) {
        (None, Some(rv)) => {
            with.page_text = Vec::new();
            let done = Event::ListDone { rv: rv.clone() };
            (Some(Ok(done)), State::Resume { rv, check: false })
        }
        (token, _) => list_page(with, token).await,
    }
}

/// Asks for the next list page.
async fn list_page(
    with: &mut With,
    continue_token: Option<String>,
) -> (Option<Result<Event, Error>>, State) {
    let selectors = &with.selectors;
    let mut params = selectors.list_params();
    let first = continue_token.is_none();
    params.continue_token = continue_token;
    let page = sharded::list(
        &with.api,
        &params,
        selectors.shard.as_ref(),
        &mut with.page_text,
    )
    .await
    .and_then(|()| decode_page(&with.decoder, &with.page_text).map_err(kube::Error::SerdeError));
    match page {
        Ok(list) => {
            let applied = sharded::applied(&list.metadata, selectors.shard.as_ref());
            let rv = list.metadata.resource_version.filter(|v| !v.is_empty());
            let continue_token = list.metadata.continue_.filter(|c| !c.is_empty());
            if rv.is_none() && continue_token.is_none() {
                return (Some(Err(Error::NoResourceVersion)), State::Empty);
            }
            let remaining = list.metadata.remaining_item_count.unwrap_or(0);
            let size = first.then(|| list.items.len() + usize::try_from(remaining).unwrap_or(0));
            let report = match applied {
                Some(applied) if first => Some(Ok(Event::ShardApplied(applied))),
                _ => None,
            };
            (
                report,
                State::Listing {
                    page: list.items,
                    continue_token,
                    rv,
                    size,
                },
            )
        }
        // A failed page (an expired continue token, too) starts the list over.
        Err(source) => (Some(Err(Error::List(source))), State::Empty),
    }
}

/// A list page decoded: its metadata and its objects.
struct DecodedPage {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
    items: VecDeque<Received>,
}

/// Decodes a list page's body.
fn decode_page(decoder: &Decoder, text: &[u8]) -> serde_json::Result<DecodedPage> {
    let page: wire::Page = serde_json::from_slice(text)?;
    let items = page
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|item| decoder.decode(item.get()))
        .collect::<serde_json::Result<_>>()?;
    Ok(DecodedPage {
        metadata: page.metadata,
        items,
    })
}
