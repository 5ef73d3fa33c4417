"""{{name}}: a switchyard handler. Logs one line per event: the kind of change, the
object's kind and namespace/name.

The daemon calls `init` once per instance with the handler's config as JSON, then `handle`
with the event; raising `Err(message)` fails the call and the daemon retries it with backoff.
The host's functions live in `wit_world.imports` (`host`, `metrics`, `cache`, `kube`),
generated from wit/world.wit when the component is built.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports.host import Level, log
from wit_world.imports.types import Event, Outcome, Outcome_Done


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        json.loads(config)

    def handle(self, event: Event) -> Outcome:
        try:
            obj = json.loads(event.object)
            meta = obj.get("metadata", {})
            key = "/".join(filter(None, [meta.get("namespace"), meta.get("name", "?")]))
            log(Level.INFO, f"{event.kind.name.lower()} {obj.get('kind', '?')} {key}")
            return Outcome_Done()
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")
