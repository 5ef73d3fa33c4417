"""The handler's own code on events, against the host in tests/host
(`python3 -m unittest` from the project folder)."""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "host"))
sys.path.insert(0, str(Path(__file__).parent.parent))

import app  # noqa: E402
import switchyard_http  # noqa: E402
from componentize_py_types import Err  # noqa: E402
from switchyard_testing import (  # noqa: E402
    Apply,
    CreateEvent,
    Delete,
    MergePatch,
    Request,
    TestHost,
    event,
    updated,
)
from wit_world.imports import kube, metrics  # noqa: E402
from wit_world.imports.host import Level  # noqa: E402
from wit_world.imports.types import EventKind, Outcome_Done, Outcome_RequeueAfter  # noqa: E402


def configmap(name, labels=None):
    meta = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


class HandlerTest(unittest.TestCase):
    def test_logs_the_change_and_the_object(self):
        demo = configmap("demo")
        report = (
            TestHost()
            .object("configmaps", demo)  # what cache reads see
            .object("configmaps", configmap("other"))
            .handle(app.WitWorld, event(EventKind.ADDED, demo))
        )
        self.assertEqual(report.outcome, Outcome_Done())
        self.assertEqual(report.logs, [(Level.INFO, "added ConfigMap default/demo")])
        self.assertEqual(report.counter("events", {"change": "added"}), 1)
        self.assertEqual(report.gauge("cached_objects", {"namespace": "default"}), 2)
        self.assertEqual(report.observed("object_kib"), [len(json.dumps(demo)) / 1024])
        self.assertEqual(report.writes, [])

    def test_adds_the_configured_label_to_an_object_without_it_and_only_then(self):
        demo = configmap("demo")
        host = TestHost().config({"label": "owner", "value": "unknown"}).object("configmaps", demo)
        report = host.handle(app.WitWorld, event(EventKind.ADDED, demo))
        patch = {"metadata": {"labels": {"owner": "unknown"}}}
        self.assertEqual(report.writes, [MergePatch("ConfigMap", "default", "demo", patch)])
        self.assertEqual(
            report.lines(),
            ["added ConfigMap default/demo", "labelled default/demo owner=unknown"],
        )

        again = host.handle(app.WitWorld, updated(demo, configmap("demo", {"owner": "unknown"})))
        self.assertEqual(again.writes, [])
        self.assertEqual(again.counter("events", {"change": "updated"}), 1)

    def test_a_refused_write_and_a_bad_config_are_errors_the_daemon_retries(self):
        demo = configmap("demo")
        host = TestHost().config({"label": "owner", "value": "unknown"}).object("configmaps", demo)
        refused = host.fail_writes("capability denied").handle(app.WitWorld, event(EventKind.ADDED, demo))
        self.assertIsNone(refused.outcome)
        self.assertEqual(refused.error, "capability denied")

        bad = TestHost().config({"label": 7}).handle(app.WitWorld, event(EventKind.ADDED, demo))
        self.assertEqual(bad.error, 'init: config: "label" and "value" must be strings')
        self.assertEqual(bad.logs, [])

    def test_what_the_host_records_of_each_write_and_what_it_refuses(self):
        test = self

        class Writer:  # a handler written here
            def init(self, config):
                pass

            def handle(self, _event):
                applied = kube.apply("configmaps", "default", "made", json.dumps({"data": {"a": "1"}}))
                kube.merge_patch("configmaps", "default", "demo", json.dumps({"data": {"b": "2"}}))
                kube.delete("configmaps", "default", "old")
                kube.create_event(applied, "Normal", "Made", "made it")
                with test.assertRaises(Err) as refused:
                    kube.create_event(applied, "Odd", "Made", "x")
                test.assertEqual(refused.exception.value, 'event type "Odd" must be Normal or Warning')
                with test.assertRaises(Err) as refused:
                    metrics.counter_add("events", -1.0, [])
                test.assertIn("a counter only goes up", refused.exception.value)
                return Outcome_RequeueAfter(500)

        report = TestHost().object("configmaps", configmap("demo")).handle(Writer, event(EventKind.SYNC, {}))
        self.assertEqual(report.outcome, Outcome_RequeueAfter(500))
        made = {"data": {"a": "1"}, "metadata": {"name": "made", "namespace": "default"}}
        self.assertEqual(
            report.writes,
            [
                Apply("configmaps", "default", "made", {"data": {"a": "1"}}),
                MergePatch("configmaps", "default", "demo", {"data": {"b": "2"}}),
                Delete("configmaps", "default", "old"),
                CreateEvent(made, "Normal", "Made", "made it"),
            ],
        )

    def test_what_the_host_answers_and_records_of_http_requests(self):
        class Notifier:  # a handler written here: posts each event's object to a webhook
            def init(self, config):
                pass

            def handle(self, event):
                url = "https://hooks.example.com/notify"
                try:
                    response = switchyard_http.post(url, json_body=json.loads(event.object))
                except switchyard_http.HttpError as e:
                    raise Err(str(e))  # the daemon retries it
                if not response.ok:
                    raise Err(f"the receiver answered {response.status}: {response.text()}")
                return Outcome_Done()

        demo = configmap("demo")
        added = event(EventKind.ADDED, demo)
        sent = TestHost().http("https://hooks.example.com/", status=200, body="ok").handle(Notifier, added)
        self.assertEqual(sent.outcome, Outcome_Done())
        self.assertEqual(
            sent.requests,
            [
                Request(
                    "POST",
                    "https://hooks.example.com/notify",
                    [("content-type", "application/json")],
                    json.dumps(demo).encode(),
                )
            ],
        )

        busy = TestHost().http("https://hooks.example.com/", status=503, body="busy").handle(Notifier, added)
        self.assertEqual(busy.error, "the receiver answered 503: busy")

        down = TestHost().http_error("https://hooks.example.com/", "ConnectionRefused").handle(Notifier, added)
        self.assertEqual(down.error, "connection: ConnectionRefused")

        # A request no stub answers is refused, as one to a destination the handler's
        # `capabilities.http` does not allow; it is recorded all the same.
        refused = TestHost().handle(Notifier, added)
        self.assertEqual(
            refused.error,
            "denied: HttpRequestDenied for https://hooks.example.com/notify (see the handler's capabilities.http)",
        )
        self.assertEqual(len(refused.requests), 1)


if __name__ == "__main__":
    unittest.main()
