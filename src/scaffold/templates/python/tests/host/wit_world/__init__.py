"""The world's bindings as componentize-py generates them, for tests outside a component."""

from typing import Protocol


class WitWorld(Protocol):
    def init(self, config: str) -> None: ...

    def handle(self, event): ...
