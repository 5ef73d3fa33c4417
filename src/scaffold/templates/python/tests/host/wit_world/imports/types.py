"""The world's shared types, with the names componentize-py generates."""

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Union


class EventKind(Enum):
    ADDED = 0
    UPDATED = 1
    DELETED = 2
    SYNC = 3


@dataclass
class Event:
    kind: EventKind
    route: str
    object: str
    old_object: Optional[str]
    attempt: int
    final_state_unknown: bool


@dataclass
class Outcome_Done:
    pass


@dataclass
class Outcome_RequeueAfter:
    value: int


Outcome = Union[Outcome_Done, Outcome_RequeueAfter]
