#!/usr/bin/env bash
# generate.sh — regenerate the committed protobuf and gRPC code of the
# Python client (leasehold/v1 from proto/leasehold/v1/leasehold.proto, and
# the private decoder of gRPC's status details). CI never runs it: the
# output is committed. Needs protoc and grpc_python_plugin (Debian:
# protobuf-compiler protobuf-compiler-grpc).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin)}
# leasehold.v1 lands in leasehold/v1 of this package: the generated imports
# ("from leasehold.v1 import leasehold_pb2") then resolve as they are.
protoc -I "$repo/proto" --python_out="$here" --pyi_out="$here" \
	--grpc_out="$here" --plugin=protoc-gen-grpc="$plugin" \
	"$repo/proto/leasehold/v1/leasehold.proto"
protoc -I "$here" --python_out="$here" "$here/leasehold/_internal/rpc_status.proto"
