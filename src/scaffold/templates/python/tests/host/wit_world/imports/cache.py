"""The `cache` interface as componentize-py generates it, answering from the objects given
to `TestHost.object` (switchyard_testing.py). Objects come back as JSON text."""

import json
from typing import List, Optional

import switchyard_testing as testing


def get(resource: str, namespace: Optional[str], name: str) -> Optional[str]:
    for obj in testing.cached(resource):
        if testing.in_namespace(obj, namespace) and (obj.get("metadata") or {}).get("name") == name:
            return json.dumps(obj)
    return None


def list(resource: str, namespace: Optional[str]) -> List[str]:  # noqa: A001 (the WIT's name)
    return [json.dumps(o) for o in testing.cached(resource) if testing.in_namespace(o, namespace)]


def list_by_index(resource: str, index: str, value: str) -> List[str]:
    values = testing.index_values(resource, index)
    return [json.dumps(o) for o in testing.cached(resource) if value in values(o)]
