"""Runs the handler in this process against the recording host in tests/host
(`python3 -m unittest` from the project folder)."""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "host"))
sys.path.insert(0, str(Path(__file__).parent.parent))

import app  # noqa: E402
from wit_world.imports import host  # noqa: E402
from wit_world.imports.types import Event, EventKind, Outcome_Done  # noqa: E402


class HandlerTest(unittest.TestCase):
    def setUp(self):
        host.logged.clear()

    def test_logs_the_change_and_the_object(self):
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "demo", "namespace": "default"},
        }
        plugin = app.WitWorld()
        plugin.init("null")
        event = Event(EventKind.ADDED, "test", json.dumps(configmap), None, 1, False)
        self.assertEqual(plugin.handle(event), Outcome_Done())
        self.assertEqual(host.logged, [(host.Level.INFO, "added ConfigMap default/demo")])


if __name__ == "__main__":
    unittest.main()
