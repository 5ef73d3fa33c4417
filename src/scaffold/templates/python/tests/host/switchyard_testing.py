"""A host for `python3 -m unittest`: the handler's own code runs in this process on an
event, and the test asserts on what it did. The modules `wit_world` and
`componentize_py_types` beside this one stand in for those componentize-py generates, and
their host functions answer from and record into the call in progress here.

    from switchyard_testing import TestHost, event

    report = (
        TestHost()
        .config({"label": "owner", "value": "unknown"})
        .object("configmaps", configmap)                  # what cache reads see
        .handle(app.WitWorld, event(EventKind.ADDED, configmap))
    )
    self.assertEqual(report.outcome, Outcome_Done())
    self.assertEqual(report.lines(), ["added ConfigMap default/demo"])
    self.assertEqual(report.counter("events", {"change": "added"}), 1)
    self.assertEqual(report.writes, [MergePatch("ConfigMap", "default", "demo", {...})])

    # A handler that sends with switchyard_http: answer it, then check what it sent.
    report = TestHost().http("https://hooks.example.com/", status=200).handle(...)
    self.assertEqual(report.requests, [Request("POST", "https://hooks.example.com/notify", ...)])

How it differs from the daemon: each `handle` makes a new instance of the class and calls
`init` and then `handle` like the daemon's fresh instance per event, but module globals
keep their values between calls in one test process; capabilities are not checked, and a
cache read may name any resource (every write is recorded, none is sent); cache reads
answer from the objects given with `object`. A host function's error is raised as in a
component: `componentize_py_types.Err` with the error's text as `value`. The `wasi:http`
modules beside this one send nothing: switchyard_http's requests are recorded and
answered from `http` and `http_error`, and one neither answers is refused as the daemon
refuses a destination the handler's `capabilities.http` does not allow (`HttpError` of
kind "denied").
"""

import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports.http_types import error_code
from wit_world.imports.types import Event, EventKind


@dataclass
class Metric:
    """A metric the handler recorded."""

    kind: str  # "counter", "gauge" or "histogram"
    name: str
    value: float
    labels: List[Tuple[str, str]]  # as given


@dataclass
class Apply:
    """`kube.apply`, recorded instead of sent."""

    resource: str
    namespace: Optional[str]
    name: str
    body: Any  # parsed from JSON


@dataclass
class MergePatch:
    """`kube.merge_patch`, recorded instead of sent."""

    resource: str
    namespace: Optional[str]
    name: str
    patch: Any  # parsed from JSON


@dataclass
class Delete:
    """`kube.delete`, recorded instead of sent."""

    resource: str
    namespace: Optional[str]
    name: str


@dataclass
class CreateEvent:
    """`kube.create_event`, recorded instead of sent."""

    object: Any  # parsed from JSON
    event_type: str
    reason: str
    message: str


@dataclass
class Request:
    """An HTTP request the handler sent (with switchyard_http), recorded."""

    method: str  # "GET", "POST", ...
    url: str
    headers: List[Tuple[str, str]]  # lowercase names and values, in order
    body: bytes = b""
    timeout_ms: Optional[int] = None  # the first-byte timeout given, if any


@dataclass
class Report:
    """What one call did."""

    outcome: Any = None  # what `handle` returned, or None when it raised Err
    error: Optional[str] = None  # the Err's message; "init: ..." for `init`
    logs: List[Tuple[Any, str]] = field(default_factory=list)  # (Level, message), in order
    metrics: List[Metric] = field(default_factory=list)  # in order
    writes: List[Any] = field(default_factory=list)  # Apply, MergePatch, Delete, CreateEvent
    requests: List[Request] = field(default_factory=list)  # sent, answered or not, in order

    def lines(self) -> List[str]:
        """The logged messages without their levels."""
        return [message for _, message in self.logs]

    def counter(self, name: str, labels: Optional[Dict[str, str]] = None) -> float:
        """The sum added to counter `name` with exactly `labels`, or 0."""
        return sum(self._series("counter", name, labels))

    def gauge(self, name: str, labels: Optional[Dict[str, str]] = None) -> Optional[float]:
        """The last value gauge `name` with exactly `labels` was set to, or None."""
        values = self._series("gauge", name, labels)
        return values[-1] if values else None

    def observed(self, name: str, labels: Optional[Dict[str, str]] = None) -> List[float]:
        """The values observed in histogram `name` with exactly `labels`, in order."""
        return self._series("histogram", name, labels)

    def _series(self, kind, name, labels):
        wanted = sorted((labels or {}).items())
        return [
            m.value
            for m in self.metrics
            if m.kind == kind and m.name == name and sorted(m.labels) == wanted
        ]


class _Call:
    """The call in progress: what the host answers and what it records."""

    def __init__(self, objects, indexes, write_error, answers):
        self.objects = objects
        self.indexes = indexes
        self.write_error = write_error
        self.answers = answers
        self.types: Dict[str, str] = {}
        self.report = Report()


_call: Optional[_Call] = None


def current() -> _Call:
    """The call in progress; an error outside `TestHost.handle`."""
    if _call is None:
        raise RuntimeError("a switchyard host function was called outside TestHost.handle")
    return _call


class TestHost:
    """A host in the test process. Give it config and cached objects, then call `handle`
    as often as needed; each call returns a `Report`."""

    __test__ = False  # not a test case, whatever a test runner guesses from the name

    def __init__(self):
        self._config = None
        self._objects: List[Tuple[str, Any]] = []
        self._indexes: Dict[str, Callable[[Any], List[str]]] = {}
        self._write_error: Optional[str] = None
        self._answers: List[Tuple[str, Any]] = []

    def config(self, config: Any) -> "TestHost":
        """The handler's `config`, as the daemon would pass it from the YAML (None if unset)."""
        self._config = config
        return self

    def object(self, resource: str, obj: Any) -> "TestHost":
        """Puts `obj` in the cache under `resource` (found by that name or by its `kind`)."""
        self._objects.append((resource, obj))
        return self

    def index(self, name: str, values: Callable[[Any], List[str]]) -> "TestHost":
        """Declares the cache index `name`: `values(obj)` gives the object's values.
        `namespace` is always there."""
        self._indexes[name] = values
        return self

    def fail_writes(self, message: str) -> "TestHost":
        """Makes every write fail with `message`, as a refused or failed write would."""
        self._write_error = message
        return self

    def http(
        self,
        url_prefix: str,
        status: int = 200,
        headers: List[Tuple[str, str]] = (),
        body: Any = b"",
    ) -> "TestHost":
        """Answers HTTP requests whose URL starts with `url_prefix` with `status`, `headers`
        and `body` (bytes or text); the first matching prefix wins. A request nothing
        answers is refused, as a destination missing from `capabilities.http` is."""
        data = body.encode() if isinstance(body, str) else bytes(body)
        self._answers.append((url_prefix, (status, list(headers), data)))
        return self

    def http_error(self, url_prefix: str, code: str = "ConnectionRefused") -> "TestHost":
        """Makes HTTP requests whose URL starts with `url_prefix` fail with the `wasi:http`
        error code named `code` ("ConnectionRefused", "HttpResponseTimeout", ...), which
        switchyard_http raises as `HttpError` ("connection: ConnectionRefused")."""
        error_code(code)  # a ValueError now for a name that is no error code
        self._answers.append((url_prefix, code))
        return self

    def handle(self, world: type, event: Any) -> Report:
        """Makes an instance of `world` (the handler's `WitWorld` class), calls `init` with
        the config and then `handle` with `event`; returns the Report. Any exception other
        than `Err` (a trap in the daemon) is raised on to the test."""
        global _call
        objects = [(r, copy.deepcopy(o)) for r, o in self._objects]
        _call = _Call(objects, dict(self._indexes), self._write_error, list(self._answers))
        report = _call.report
        try:
            plugin = world()
            try:
                plugin.init(json.dumps(self._config))
            except Err as e:
                report.error = f"init: {e.value}"
                return report
            try:
                report.outcome = plugin.handle(event)
            except Err as e:
                report.error = e.value
            return report
        finally:
            _call = None


def event(
    kind: EventKind, obj: Any, old: Any = None, route: str = "test", attempt: int = 1
) -> Event:
    """An event of `kind` about `obj` on `route`, attempt `attempt`; `old` is the previous
    state for an update."""
    old_object = None if old is None else json.dumps(old)
    return Event(kind, route, json.dumps(obj), old_object, attempt, False)


def updated(old: Any, new: Any) -> Event:
    """An `updated` event from `old` to `new`, on route `test`, first attempt."""
    return event(EventKind.UPDATED, new, old=old)


# ---- wasi:http/outgoing-handler: answered from TestHost.http and http_error ----


def http_answer(request: Request) -> Any:
    """Records `request` and gives the test's answer for it: (status, headers, body), or
    the name of the error code it fails with."""
    call = current()
    call.report.requests.append(request)
    for prefix, answer in call.answers:
        if request.url.startswith(prefix):
            return answer
    return "HttpRequestDenied"


# ---- switchyard:plugin/metrics, checked as the daemon checks them ----

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _number(value: float) -> str:
    """`value` as the daemon's messages print it (Rust's `{}` for an f64)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return str(int(value)) if value == int(value) else repr(value)


def record_metric(kind: str, name: str, value: float, labels: List[Tuple[str, str]]) -> None:
    """Records a metric of `kind`, or raises Err as the daemon would refuse it."""
    call = current()
    if not _METRIC_NAME.fullmatch(name):
        raise Err(
            f"invalid metric name {json.dumps(name)}: use letters, digits, '_' and ':', "
            "not starting with a digit"
        )
    family = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
    q = json.dumps(family)
    if kind == "counter" and not (math.isfinite(value) and value >= 0):
        raise Err(
            f"counter {q}: cannot add {_number(value)}: a counter only goes up by finite amounts"
        )
    if kind == "histogram" and not math.isfinite(value):
        raise Err(f"histogram {q}: cannot observe {_number(value)}: not a finite number")
    if kind == "gauge" and math.isnan(value):
        raise Err(f"gauge {q}: cannot set NaN")
    seen = set()
    for label, _ in labels:
        if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
            raise Err(
                f"invalid label name {json.dumps(label)}: use letters, digits and '_', "
                "not starting with a digit or '__'"
            )
        if label == "handler":
            raise Err('the label "handler" is set by the host to the handler\'s name')
        if label in seen:
            raise Err(f"label {json.dumps(label)} is given twice")
        seen.add(label)
    known = call.types.get(family)
    if known is not None and known != kind:
        raise Err(f"metric {q} is a {known}, not a {kind}: use another name")
    call.types[family] = kind
    call.report.metrics.append(Metric(kind, name, value, [(k, v) for k, v in labels]))


# ---- switchyard:plugin/cache: answers from the objects given to TestHost.object ----


def cached(resource: str) -> List[Any]:
    """The cached objects of `resource` (by the name given to `object`, or by kind)."""
    return [o for r, o in current().objects if r == resource or o.get("kind") == resource]


def in_namespace(obj: Any, namespace: Optional[str]) -> bool:
    return namespace is None or (obj.get("metadata") or {}).get("namespace") == namespace


def index_values(resource: str, index: str) -> Callable[[Any], List[str]]:
    """The values function of `index`, or Err as the daemon answers an unknown index."""
    if index == "namespace":
        return lambda o: [(o.get("metadata") or {}).get("namespace")]
    values = current().indexes.get(index)
    if values is None:
        raise Err(f"{resource} has no index {json.dumps(index)} (declare it with TestHost.index)")
    return values


# ---- switchyard:plugin/kube: recorded, never sent ----


def record_write(write: Any) -> None:
    """Records `write`, or raises Err when writes are set to fail."""
    call = current()
    if call.write_error is not None:
        raise Err(call.write_error)
    call.report.writes.append(write)


def parse(what: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise Err(f"{what}: not JSON: {e}")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out
