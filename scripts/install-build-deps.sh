#!/usr/bin/env bash
# Installs what building tern needs beyond the Rust toolchain: etcd-client's build
# script runs `protoc` and imports Google's well-known .proto files (libprotobuf-dev).
# Idempotent and quiet when everything is there.
set -euo pipefail
need_apt=()
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/descriptor.proto ] || need_apt+=(libprotobuf-dev)
if ((${#need_apt[@]})); then
  echo "installing build tools: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi
