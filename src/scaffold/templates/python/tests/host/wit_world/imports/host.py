"""A recording `host` interface: what the handler logs lands in `logged`."""

from enum import Enum

logged = []


class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def log(level: Level, message: str) -> None:
    logged.append((level, message))
