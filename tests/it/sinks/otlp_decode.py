"""Decodes an OTLP/HTTP logs request (protobuf on stdin) with OpenTelemetry's own
definitions (PyPI's opentelemetry-proto) and prints it as OTLP's JSON form. Fails when a
byte of it is not understood: the request read, its unknown fields dropped and written
again, must be the bytes that came."""

import json
import sys

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

data = sys.stdin.buffer.read()
request = ExportLogsServiceRequest()
request.ParseFromString(data)
request.DiscardUnknownFields()
if request.SerializeToString() != data:
    sys.exit("the request holds fields or encodings the definitions do not know")
print(json.dumps(MessageToDict(request)))
