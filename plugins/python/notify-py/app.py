"""notify-py: posts each event to a webhook, a switchyard handler in Python.

Config: {"url": "https://hooks.example.com/..."}; the URL's destination must be on the
handler's `capabilities.http` allow-list. A 5xx, a timeout or a refused connection raises,
so the daemon retries the event with backoff; a 4xx (but 429) raises an error beginning with
`permanent:`, which the daemon does not retry: a dead letter at once, with the answer in it.
"""

import json

import wit_world
from componentize_py_types import Err
from switchyard_http import HttpError, post
from wit_world.imports.host import Level, log
from wit_world.imports.types import Event, Outcome, Outcome_Done

url = None


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        global url
        settings = json.loads(config) or {}
        if not isinstance(settings, dict) or not isinstance(settings.get("url"), str):
            raise Err('config must be an object like {"url": "https://..."}')
        url = settings["url"]

    def handle(self, event: Event) -> Outcome:
        obj = json.loads(event.object)
        meta = obj.get("metadata", {})
        summary = {
            "kind": event.kind.name.lower(),
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "attempt": event.attempt,
        }
        try:
            response = post(url, json_body=summary, headers=[("x-attempt", str(event.attempt))])
        except HttpError as e:
            raise Err(str(e))
        except Exception as e:  # anything else is an error too, never a trap
            raise Err(f"{type(e).__name__}: {e}")
        if not response.ok:
            error = f"the receiver answered {response.status}: {response.text()[:100]}"
            # A 4xx will not get better by itself (a 429 will): a dead letter at once.
            permanent = 400 <= response.status < 500 and response.status != 429
            raise Err(f"permanent: {error}" if permanent else error)
        log(Level.DEBUG, f"delivered: {response.status}")
        return Outcome_Done()
