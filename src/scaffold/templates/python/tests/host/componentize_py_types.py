"""The error type componentize-py gives handlers, for tests outside a component."""


class Err(Exception):
    """An error returned to the host: `value` is its message."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value
