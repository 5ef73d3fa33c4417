// notify-js: posts each event to a webhook with `fetch`, a switchyard handler in JavaScript.
//
// Config: {"url": "https://hooks.example.com/..."}; the URL's destination must be on the
// handler's `capabilities.http` allow-list. The body is a small JSON summary of the change.
// A 5xx, a timeout or a refused connection throws, so the daemon retries the event with
// backoff (and keeps it as a dead letter after `max_retries`); a 4xx throws too, with the
// receiver's answer in the message, so it shows in the handler's last errors.
import { log } from 'switchyard:plugin/host@0.1.0';

let url = null;

function asError(e) {
  return typeof e === 'string' ? e : `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
}

export function init(config) {
  const settings = JSON.parse(config) ?? {};
  if (typeof settings.url !== 'string') {
    throw 'config must be an object like {"url": "https://..."}';
  }
  url = settings.url;
}

export async function handle(event) {
  try {
    const obj = JSON.parse(event.object);
    const meta = obj.metadata ?? {};
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-attempt': String(event.attempt) },
      body: JSON.stringify({
        kind: event.kind,
        namespace: meta.namespace ?? null,
        name: meta.name ?? null,
        resourceVersion: meta.resourceVersion ?? null,
        attempt: event.attempt,
      }),
    });
    const text = await response.text();
    if (!response.ok) {
      throw `the receiver answered ${response.status}: ${text.slice(0, 100)}`;
    }
    log('debug', `delivered: ${response.status}`);
    return { tag: 'done' };
  } catch (e) {
    throw asError(e);
  }
}
