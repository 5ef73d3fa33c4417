"""Outbound HTTP for switchyard handlers written in Python, over `wasi:http`.

    from switchyard_http import HttpError, post

    response = post("https://hooks.example.com/notify", json_body={"text": "a pod failed"})
    if response.status >= 500:
        raise Err(f"the receiver answered {response.status}")

Requests go only to destinations the handler's `capabilities.http` allows. A refused
request, a timeout or a failed connection raises `HttpError` (its `kind` says which:
"denied", "timeout", "connection", "too-large", "other"); raise `Err(str(e))` from `handle`
and the daemon retries the event with backoff.
"""

import json as _json
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from componentize_py_types import Err, Ok
from wit_world.imports import http_types as _t
from wit_world.imports import outgoing_handler as _handler
from wit_world.imports import streams as _streams

_DENIED = (_t.ErrorCode_HttpRequestDenied, _t.ErrorCode_DestinationIpProhibited)
_TIMEOUT = (
    _t.ErrorCode_ConnectionTimeout,
    _t.ErrorCode_ConnectionReadTimeout,
    _t.ErrorCode_ConnectionWriteTimeout,
    _t.ErrorCode_HttpResponseTimeout,
    _t.ErrorCode_DnsTimeout,
)
_TOO_LARGE = (_t.ErrorCode_HttpRequestBodySize, _t.ErrorCode_HttpResponseBodySize)
_CONNECTION = (
    _t.ErrorCode_ConnectionRefused,
    _t.ErrorCode_ConnectionTerminated,
    _t.ErrorCode_DnsError,
    _t.ErrorCode_DestinationNotFound,
    _t.ErrorCode_DestinationUnavailable,
    _t.ErrorCode_TlsProtocolError,
    _t.ErrorCode_TlsCertificateError,
    _t.ErrorCode_TlsAlertReceived,
)


class HttpError(Exception):
    """A request that got no response: `kind` is denied, timeout, connection, too-large or
    other; the message names the host's error code."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass
class Response:
    """A response, read whole."""

    status: int
    headers: List[Tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return _json.loads(self.body)

    def header(self, name: str) -> Optional[str]:
        name = name.lower()
        return next((v for n, v in self.headers if n.lower() == name), None)


def _error(code, url: str) -> HttpError:
    name = type(code).__name__.removeprefix("ErrorCode_")
    if isinstance(code, _DENIED):
        return HttpError("denied", f"{name} for {url} (see the handler's capabilities.http)")
    if isinstance(code, _TIMEOUT):
        return HttpError("timeout", name)
    if isinstance(code, _TOO_LARGE):
        return HttpError("too-large", name)
    if isinstance(code, _CONNECTION):
        return HttpError("connection", name)
    return HttpError("other", name)


def _method(name: str):
    simple = {
        "GET": _t.Method_Get,
        "HEAD": _t.Method_Head,
        "POST": _t.Method_Post,
        "PUT": _t.Method_Put,
        "DELETE": _t.Method_Delete,
        "OPTIONS": _t.Method_Options,
        "PATCH": _t.Method_Patch,
    }
    name = name.upper()
    return simple[name]() if name in simple else _t.Method_Other(name)


def _split(url: str) -> Tuple[str, str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise HttpError("other", f"{url!r} is not an absolute URL")
    end = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=len(rest))
    authority, path = rest[:end], rest[end:] or "/"
    if not authority:
        raise HttpError("other", f"{url!r} names no host")
    return scheme.lower(), authority, path


def request(
    method: str,
    url: str,
    headers: List[Tuple[str, str]] = (),
    body: bytes = b"",
    timeout_ms: Optional[int] = None,
) -> Response:
    """Sends a request and reads the whole response."""
    scheme, authority, path = _split(url)
    fields = _t.Fields.from_list([(n.lower(), v.encode()) for n, v in headers])
    outgoing = _t.OutgoingRequest(fields)
    outgoing.set_method(_method(method))
    outgoing.set_scheme(
        _t.Scheme_Https() if scheme == "https" else _t.Scheme_Http() if scheme == "http" else _t.Scheme_Other(scheme)
    )
    outgoing.set_authority(authority)
    outgoing.set_path_with_query(path)
    out_body = outgoing.body()
    options = None
    if timeout_ms is not None:
        options = _t.RequestOptions()
        options.set_first_byte_timeout(timeout_ms * 1_000_000)
    try:
        pending = _handler.handle(outgoing, options)
    except Err as e:
        raise _error(e.value, url) from None
    # A request the host refuses or fails stops reading the body: the write then fails,
    # and the host's answer (below) says why.
    written = True
    try:
        with out_body.write() as stream:
            for i in range(0, len(body), 4096):
                stream.blocking_write_and_flush(body[i : i + 4096])
        _t.OutgoingBody.finish(out_body, None)
    except Err:
        written = False
    with pending.subscribe() as ready:
        ready.block()
    result = pending.get()
    if result is None or isinstance(result, Err):
        raise HttpError("other", "no response")
    if isinstance(result.value, Err):
        raise _error(result.value.value, url)
    if not written:
        raise HttpError("connection", "writing the body failed")
    response = result.value.value
    status = response.status()
    with response.headers() as fields:
        names = [(n, v.decode("utf-8", "replace")) for n, v in fields.entries()]
    incoming = response.consume()
    data = bytearray()
    with incoming.stream() as stream:
        while True:
            try:
                data += stream.blocking_read(65536)
            except Err as e:
                if isinstance(e.value, _streams.StreamError_Closed):
                    break
                raise HttpError("connection", "the response body broke off") from None
    _t.IncomingBody.finish(incoming)
    return Response(status, names, bytes(data))


def post(url: str, json_body=None, headers: List[Tuple[str, str]] = (), body: bytes = b"", timeout_ms=None) -> Response:
    """POSTs `json_body` as JSON (or `body` as it is)."""
    headers = list(headers)
    if json_body is not None:
        headers.append(("content-type", "application/json"))
        body = _json.dumps(json_body).encode()
    return request("POST", url, headers, body, timeout_ms)


def get(url: str, headers: List[Tuple[str, str]] = (), timeout_ms=None) -> Response:
    """GETs `url`."""
    return request("GET", url, headers, b"", timeout_ms)
