"""{{name}}: a switchyard handler. For each event it

- logs one line: the kind of change, the object's kind and namespace/name;
- counts events by change (counter `events`), records the object's size (histogram
  `object_kib`) and how many objects of its kind the daemon's cache holds in its namespace
  (gauge `cached_objects`);
- given a config like {"label": "owner", "value": "unknown"}, adds that label to an object
  that lacks it, with a merge patch (grant the handler `capabilities: {configmaps: [patch]}`).

The daemon calls `init` once per instance with the handler's config as JSON, then `handle`
with the event; raising `Err(message)` fails the call and the daemon retries it with backoff.
The host's functions live in `wit_world.imports` (`host`, `metrics`, `cache`, `kube`),
generated from wit/world.wit when the component is built; a host function's error is
raised as `Err`.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import cache, kube, metrics
from wit_world.imports.host import Level, log
from wit_world.imports.types import Event, EventKind, Outcome, Outcome_Done

# The label to add, (name, value), or None.
label = None


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        global label
        try:
            settings = json.loads(config) or {}
            label = None
            if "label" in settings:
                if not isinstance(settings["label"], str) or not isinstance(settings.get("value"), str):
                    raise Err('config: "label" and "value" must be strings')
                label = (settings["label"], settings["value"])
        except Err:
            raise
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")

    def handle(self, event: Event) -> Outcome:
        try:
            obj = json.loads(event.object)
            meta = obj.get("metadata") or {}
            key = "/".join(filter(None, [meta.get("namespace"), meta.get("name", "?")]))
            change = event.kind.name.lower()
            log(Level.INFO, f"{change} {obj.get('kind', '?')} {key}")
            metrics.counter_add("events", 1.0, [("change", change)])
            metrics.histogram_observe("object_kib", len(event.object.encode()) / 1024, [])
            if obj.get("kind") and meta.get("namespace"):
                cached = cache.list(obj["kind"], meta["namespace"])
                metrics.gauge_set("cached_objects", float(len(cached)), [("namespace", meta["namespace"])])
            if label and event.kind != EventKind.DELETED and label[0] not in (meta.get("labels") or {}):
                patch = {"metadata": {"labels": {label[0]: label[1]}}}
                kube.merge_patch(obj["kind"], meta.get("namespace"), meta["name"], json.dumps(patch))
                log(Level.INFO, f"labelled {key} {label[0]}={label[1]}")
            return Outcome_Done()
        except Err:
            raise  # a host function's error, or one of ours: the daemon retries it
        except Exception as e:
            raise Err(f"{type(e).__name__}: {e}")
