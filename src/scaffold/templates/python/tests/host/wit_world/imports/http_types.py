"""The `wasi:http/types` interface as componentize-py generates it, as far as a handler
uses it to send a request and read the response (plugins' switchyard_http.py does): the
requests stay in the test process, and outgoing_handler.py answers them from the test's
call (switchyard_testing.py)."""

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from componentize_py_types import Err, Ok
from wit_world.imports.poll import Pollable
from wit_world.imports.streams import InputStream, OutputStream


class _Resource:
    """A resource handle: usable with `with`, which drops it."""

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


# ---- error-code: why a request got no response ----


@dataclass
class ErrorCode_ConfigurationError:
    pass


@dataclass
class ErrorCode_ConnectionLimitReached:
    pass


@dataclass
class ErrorCode_ConnectionReadTimeout:
    pass


@dataclass
class ErrorCode_ConnectionRefused:
    pass


@dataclass
class ErrorCode_ConnectionTerminated:
    pass


@dataclass
class ErrorCode_ConnectionTimeout:
    pass


@dataclass
class ErrorCode_ConnectionWriteTimeout:
    pass


@dataclass
class ErrorCode_DestinationIpProhibited:
    pass


@dataclass
class ErrorCode_DestinationIpUnroutable:
    pass


@dataclass
class ErrorCode_DestinationNotFound:
    pass


@dataclass
class ErrorCode_DestinationUnavailable:
    pass


@dataclass
class ErrorCode_DnsError:
    value: Any = None


@dataclass
class ErrorCode_DnsTimeout:
    pass


@dataclass
class ErrorCode_HttpProtocolError:
    value: Any = None


@dataclass
class ErrorCode_HttpRequestBodySize:
    value: Any = None


@dataclass
class ErrorCode_HttpRequestDenied:
    pass


@dataclass
class ErrorCode_HttpRequestHeaderSectionSize:
    value: Any = None


@dataclass
class ErrorCode_HttpRequestHeaderSize:
    value: Any = None


@dataclass
class ErrorCode_HttpRequestLengthRequired:
    pass


@dataclass
class ErrorCode_HttpRequestMethodInvalid:
    pass


@dataclass
class ErrorCode_HttpRequestTrailerSectionSize:
    pass


@dataclass
class ErrorCode_HttpRequestTrailerSize:
    value: Any = None


@dataclass
class ErrorCode_HttpRequestUriInvalid:
    pass


@dataclass
class ErrorCode_HttpRequestUriTooLong:
    pass


@dataclass
class ErrorCode_HttpResponseBodySize:
    value: Any = None


@dataclass
class ErrorCode_HttpResponseContentCoding:
    value: Any = None


@dataclass
class ErrorCode_HttpResponseHeaderSectionSize:
    pass


@dataclass
class ErrorCode_HttpResponseHeaderSize:
    value: Any = None


@dataclass
class ErrorCode_HttpResponseIncomplete:
    pass


@dataclass
class ErrorCode_HttpResponseTimeout:
    pass


@dataclass
class ErrorCode_HttpResponseTrailerSectionSize:
    pass


@dataclass
class ErrorCode_HttpResponseTrailerSize:
    value: Any = None


@dataclass
class ErrorCode_HttpResponseTransferCoding:
    value: Any = None


@dataclass
class ErrorCode_HttpUpgradeFailed:
    pass


@dataclass
class ErrorCode_InternalError:
    value: Any = None


@dataclass
class ErrorCode_LoopDetected:
    pass


@dataclass
class ErrorCode_TlsAlertReceived:
    value: Any = None


@dataclass
class ErrorCode_TlsCertificateError:
    pass


@dataclass
class ErrorCode_TlsProtocolError:
    pass


# ---- method and scheme ----


@dataclass
class Method_Get:
    pass


@dataclass
class Method_Head:
    pass


@dataclass
class Method_Post:
    pass


@dataclass
class Method_Put:
    pass


@dataclass
class Method_Delete:
    pass


@dataclass
class Method_Connect:
    pass


@dataclass
class Method_Options:
    pass


@dataclass
class Method_Trace:
    pass


@dataclass
class Method_Patch:
    pass


@dataclass
class Method_Other:
    value: str


@dataclass
class Scheme_Http:
    pass


@dataclass
class Scheme_Https:
    pass


@dataclass
class Scheme_Other:
    value: str


def _name(case: Any, prefix: str) -> str:
    """`Method_Post()` as "POST", `Method_Other("PURGE")` as "PURGE"; likewise schemes."""
    value = getattr(case, "value", None)
    return value if isinstance(value, str) else type(case).__name__.removeprefix(prefix).upper()


# ---- requests ----


class Fields(_Resource):
    """Header names and values (bytes), in order."""

    def __init__(self, entries: Optional[List[Tuple[str, bytes]]] = None):
        self._entries = [(name.lower(), bytes(value)) for name, value in entries or []]

    @staticmethod
    def from_list(entries: List[Tuple[str, bytes]]) -> "Fields":
        return Fields(entries)

    def entries(self) -> List[Tuple[str, bytes]]:
        return list(self._entries)

    def entries_text(self) -> List[Tuple[str, str]]:
        """The entries with their values as text (the test host's own)."""
        return [(name, value.decode("utf-8", "replace")) for name, value in self._entries]


class RequestOptions(_Resource):
    def __init__(self):
        self._first_byte_timeout: Optional[int] = None

    def set_first_byte_timeout(self, duration: Optional[int]) -> None:
        self._first_byte_timeout = duration

    def get_first_byte_timeout(self) -> Optional[int]:
        return self._first_byte_timeout


class OutgoingRequest(_Resource):
    def __init__(self, headers: Fields):
        self._headers = headers
        self._method: Any = Method_Get()
        self._scheme: Any = None
        self._authority: Optional[str] = None
        self._path: Optional[str] = None
        self.written = bytearray()  # the body written so far
        self.recorded = None  # the test's record of the request, once sent

    def set_method(self, method: Any) -> None:
        self._method = method

    def set_scheme(self, scheme: Any) -> None:
        self._scheme = scheme

    def set_authority(self, authority: Optional[str]) -> None:
        self._authority = authority

    def set_path_with_query(self, path: Optional[str]) -> None:
        self._path = path

    def headers(self) -> Fields:
        return self._headers

    def body(self) -> "OutgoingBody":
        return OutgoingBody(self)

    def method_name(self) -> str:
        """The method as text (the test host's own)."""
        return _name(self._method, "Method_")

    def url(self) -> str:
        """The request's URL (the test host's own)."""
        scheme = "https" if self._scheme is None else _name(self._scheme, "Scheme_").lower()
        return f"{scheme}://{self._authority or ''}{self._path or '/'}"


class OutgoingBody(_Resource):
    def __init__(self, request: OutgoingRequest):
        self._request = request

    def write(self) -> OutputStream:
        return OutputStream(self._written)

    def _written(self, data: bytes) -> None:
        request = self._request
        request.written += data
        if request.recorded is not None:
            request.recorded.body = bytes(request.written)

    @staticmethod
    def finish(this: "OutgoingBody", trailers: Optional[Fields]) -> None:
        pass


# ---- responses: the answer a test gave, or the error code it named ----


class IncomingBody(_Resource):
    def __init__(self, data: bytes):
        self._data = data

    def stream(self) -> InputStream:
        return InputStream(self._data)

    @staticmethod
    def finish(this: "IncomingBody") -> None:
        pass


class IncomingResponse(_Resource):
    def __init__(self, status: int, headers: List[Tuple[str, str]], body: bytes):
        self._status = status
        self._headers = Fields([(name, value.encode()) for name, value in headers])
        self._body = body

    def status(self) -> int:
        return self._status

    def headers(self) -> Fields:
        return self._headers

    def consume(self) -> IncomingBody:
        return IncomingBody(self._body)


class FutureIncomingResponse(_Resource):
    """`answer` is the test's reply (status, headers, body) or the name of an error code."""

    def __init__(self, answer: Any):
        self._answer = answer

    def subscribe(self) -> Pollable:
        return Pollable()

    def get(self) -> Optional[Any]:
        if isinstance(self._answer, str):
            return Ok(Err(error_code(self._answer)))
        status, headers, body = self._answer
        return Ok(Ok(IncomingResponse(status, headers, body)))


def error_code(name: str) -> Any:
    """The error code named `name` ("ConnectionRefused"), or ValueError."""
    code = globals().get(f"ErrorCode_{name}")
    if not isinstance(code, type):
        known = sorted(n.removeprefix("ErrorCode_") for n in globals() if n.startswith("ErrorCode_"))
        raise ValueError(f"{name!r} is not a wasi:http error code; one of {', '.join(known)}")
    return code()
