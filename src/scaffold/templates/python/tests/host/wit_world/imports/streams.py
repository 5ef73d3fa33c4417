"""The `wasi:io/streams` interface as componentize-py generates it, for the test host's
`wasi:http` (http_types.py): bodies in memory."""

from dataclasses import dataclass
from typing import Any, Callable

from componentize_py_types import Err


@dataclass
class StreamError_LastOperationFailed:
    value: Any = None


@dataclass
class StreamError_Closed:
    pass


class InputStream:
    """Reads `data`, then raises `Err(StreamError_Closed())` as a finished body does."""

    def __init__(self, data: bytes):
        self._data = data

    def blocking_read(self, length: int) -> bytes:
        if not self._data:
            raise Err(StreamError_Closed())
        chunk, self._data = self._data[:length], self._data[length:]
        return chunk

    read = blocking_read

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


class OutputStream:
    """Hands each write to `sink`."""

    def __init__(self, sink: Callable[[bytes], None]):
        self._sink = sink

    def blocking_write_and_flush(self, contents: bytes) -> None:
        self._sink(bytes(contents))

    write = blocking_write_and_flush

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False
