"""The `host` interface as componentize-py generates it, recording into the test's call
(switchyard_testing.py)."""

from enum import Enum

import switchyard_testing


class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def log(level: Level, message: str) -> None:
    switchyard_testing.current().report.logs.append((level, message))
