"""The `kube` interface as componentize-py generates it: the writes the handler asks for
are recorded in the test's call (switchyard_testing.py), never sent. A failure raises
`Err(message)`, as in a component."""

import json
from typing import Optional

import switchyard_testing as testing
from componentize_py_types import Err
from switchyard_testing import Apply, CreateEvent, Delete, MergePatch


def apply(resource: str, namespace: Optional[str], name: str, body: str) -> str:
    obj = testing.parse("apply", body)
    testing.record_write(Apply(resource, namespace, name, json.loads(body)))
    meta = dict(obj.get("metadata") or {}, name=name)
    if namespace is not None:
        meta["namespace"] = namespace
    obj["metadata"] = meta
    return json.dumps(obj)


def merge_patch(resource: str, namespace: Optional[str], name: str, patch: str) -> str:
    changes = testing.parse("merge-patch", patch)
    found = next(
        (
            o
            for o in testing.cached(resource)
            if testing.in_namespace(o, namespace) and (o.get("metadata") or {}).get("name") == name
        ),
        None,
    )
    if found is None:
        raise Err(f"{resource} {name if namespace is None else f'{namespace}/{name}'} not found")
    testing.record_write(MergePatch(resource, namespace, name, changes))
    return json.dumps(testing.merge(found, changes))


def delete(resource: str, namespace: Optional[str], name: str) -> None:
    testing.record_write(Delete(resource, namespace, name))


def create_event(object: str, event_type: str, reason: str, message: str) -> None:  # noqa: A002
    if event_type not in ("Normal", "Warning"):
        raise Err(f"event type {json.dumps(event_type)} must be Normal or Warning")
    testing.record_write(CreateEvent(testing.parse("event", object), event_type, reason, message))
