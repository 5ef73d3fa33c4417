"""A loopback OTLP/HTTP receiver for the traces tests: decodes each export with the official
protobuf definitions (PyPI's opentelemetry-proto) and prints one JSON line per request and
per span on standard output. The first line is {"port": N}."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    """An AnyValue as JSON."""
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def emit(line):
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        emit({
            "request": self.path,
            "content_type": self.headers.get("content-type"),
            "headers": {k.lower(): v for k, v in self.headers.items()},
        })
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    emit({
                        "span": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "links": [link.span_id.hex() for link in span.links],
                        "status": span.status.code,
                        "resource": resource,
                    })
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
emit({"port": server.server_address[1]})
server.serve_forever()
