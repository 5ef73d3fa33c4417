"""A recording `kube` interface: the writes the handler asks for land in `writes`."""

import json

writes = []


def apply(resource, namespace, name, body):
    writes.append(("apply", resource, namespace, name, json.loads(body)))
    return body


def merge_patch(resource, namespace, name, patch):
    writes.append(("merge-patch", resource, namespace, name, json.loads(patch)))
    return patch


def delete(resource, namespace, name):
    writes.append(("delete", resource, namespace, name))


def create_event(object, event_type, reason, message):
    writes.append(("event", json.loads(object), event_type, reason, message))
