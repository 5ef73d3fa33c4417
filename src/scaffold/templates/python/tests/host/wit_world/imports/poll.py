"""The `wasi:io/poll` interface as componentize-py generates it, for the test host's
`wasi:http` (http_types.py): a test's answers are ready at once."""


class Pollable:
    def ready(self) -> bool:
        return True

    def block(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False
