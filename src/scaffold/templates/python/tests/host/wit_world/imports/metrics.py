"""The `metrics` interface as componentize-py generates it, recording into the test's call
(switchyard_testing.py). A refusal raises `Err(message)`, as in a component."""

from typing import List, Tuple

import switchyard_testing


def counter_add(name: str, value: float, labels: List[Tuple[str, str]]) -> None:
    switchyard_testing.record_metric("counter", name, float(value), labels)


def gauge_set(name: str, value: float, labels: List[Tuple[str, str]]) -> None:
    switchyard_testing.record_metric("gauge", name, float(value), labels)


def histogram_observe(name: str, value: float, labels: List[Tuple[str, str]]) -> None:
    switchyard_testing.record_metric("histogram", name, float(value), labels)
