#!/usr/bin/env bash
# Prints the digest of the sources the builtin sinks are built from: the SHA-256 of the
# `sha256sum` lines of every file (sorted by path) of the shipped sinks, the SigV4 crate, the SDK, the WIT
# contract and the plugins workspace's Cargo.toml and Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/../plugins"
find sinks/webhook sinks/slack sinks/cloudevents \
  sinks/alertmanager \
  sinks/rabbitmq \
  sinks/otlp \
  sinks/pagerduty sinks/opsgenie sinks/teams sinks/discord \
  sinks/aws sigv4 \
  sdk wit Cargo.toml Cargo.lock -type f \
  -not -path '*/target/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
