// notify-js: posts each event to a webhook with `fetch`, a switchyard handler in JavaScript.
//
// Config: {"url": "https://hooks.example.com/..."}; the URL's destination must be on the
// handler's `capabilities.http` allow-list. The body is a small JSON summary of the change.
// A 5xx, a timeout or a refused connection throws, so the daemon retries the event with
// backoff (and keeps it as a dead letter after `max_retries`); a 4xx (but 429) throws an
// error beginning with `permanent:`, which the daemon does not retry: the event becomes a
// dead letter at once, with the receiver's answer in it.
import { log } from 'switchyard:plugin/host@0.1.1';

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
      const error = `the receiver answered ${response.status}: ${text.slice(0, 100)}`;
      // A 4xx will not get better by itself (a 429 will): no retries, a dead letter at once.
      const permanent = response.status >= 400 && response.status < 500 && response.status !== 429;
      throw permanent ? `permanent: ${error}` : error;
    }
    log('debug', `delivered: ${response.status}`);
    return { tag: 'done' };
  } catch (e) {
    throw asError(e);
  }
}
