"""The `wasi:http/outgoing-handler` interface as componentize-py generates it: nothing is
sent; the request is recorded in the test's call and answered from `TestHost.http` and
`TestHost.http_error` (switchyard_testing.py)."""

from typing import Optional

import switchyard_testing as testing
from wit_world.imports.http_types import (
    FutureIncomingResponse,
    OutgoingRequest,
    RequestOptions,
)


def handle(request: OutgoingRequest, options: Optional[RequestOptions]) -> FutureIncomingResponse:
    timeout = None if options is None else options.get_first_byte_timeout()
    sent = testing.Request(
        request.method_name(),
        request.url(),
        request.headers().entries_text(),
        b"",
        None if timeout is None else timeout // 1_000_000,
    )
    request.recorded = sent  # the body, written after this call, lands in the record
    sent.body = bytes(request.written)
    return FutureIncomingResponse(testing.http_answer(sent))
