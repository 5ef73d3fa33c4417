"""event-summary: a switchyard handler written in Python.

Logs one line per event through the host's `log`:

    PREFIX KIND OBJECT-KIND NAMESPACE/NAME rv=RESOURCE-VERSION route=ROUTE

`PREFIX` comes from the handler's config (`{"prefix": "..."}`, default "event-summary").
The object's annotations steer the outcome:

- `event-summary/error: MESSAGE` fails the call with MESSAGE (retried with backoff);
- `event-summary/requeue-ms: N` asks to be called again for the object after N ms.

Any other exception becomes an error too, named by its type, instead of a trap.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports.host import Level, log
from wit_world.imports.types import Event, Outcome, Outcome_Done, Outcome_RequeueAfter

ERROR = "event-summary/error"
REQUEUE_MS = "event-summary/requeue-ms"

# The daemon calls `init` and then `handle` on one fresh instance per event.
prefix = "event-summary"


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        global prefix
        settings = json.loads(config) or {}
        if not isinstance(settings, dict) or not isinstance(settings.get("prefix", ""), str):
            raise Err('config must be an object like {"prefix": "..."}')
        prefix = settings.get("prefix", prefix)

    def handle(self, event: Event) -> Outcome:
        try:
            return summarize(event)
        except Err:
            raise
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")


def summarize(event: Event) -> Outcome:
    obj = json.loads(event.object)
    meta = obj.get("metadata", {})
    annotations = meta.get("annotations") or {}
    if ERROR in annotations:
        raise Err(annotations[ERROR])
    key = "/".join(filter(None, [meta.get("namespace"), meta.get("name", "?")]))
    log(
        Level.INFO,
        f"{prefix} {event.kind.name.lower()} {obj.get('kind', '?')} {key}"
        f" rv={meta.get('resourceVersion', '?')} route={event.route}",
    )
    if REQUEUE_MS in annotations:
        return Outcome_RequeueAfter(int(annotations[REQUEUE_MS]))
    return Outcome_Done()
