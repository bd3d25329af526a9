#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian machine: system packages,
# Python clients into .venv/ and kafkajs into compat/kafkajs/node_modules.
# Idempotent: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
bash scripts/install-build-deps.sh
command -v kcat >/dev/null || need_apt+=(kcat)
command -v etcd >/dev/null || need_apt+=(etcd-server)
# compat/test_security.py makes its test certificates with openssl.
command -v openssl >/dev/null || need_apt+=(openssl)
# compat/test_readme.py runs the README's curl commands.
command -v curl >/dev/null || need_apt+=(curl)
# compat/test_sarama.py: Debian's Go and Sarama 1.22 (built GOPATH-style, offline).
command -v go >/dev/null || need_apt+=(golang-go)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || need_apt+=(golang-github-shopify-sarama-dev)
if ((${#need_apt[@]})); then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Reinstall whenever compat/requirements.txt changes (stamp = its checksum).
req_sum=$(sha256sum compat/requirements.txt | cut -d' ' -f1)
if [ "$(cat .venv/.compat-requirements.sha256 2>/dev/null)" != "$req_sum" ] ||
   ! .venv/bin/python -c 'import confluent_kafka, kafka, aiokafka, faust, rocksdict, pytest, pytest_timeout, snappy, lz4.frame, zstandard' 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r compat/requirements.txt
  echo "$req_sum" > .venv/.compat-requirements.sha256
fi

# npm ci whenever the committed lockfile differs from what was installed
# (stamp = its checksum, kept inside node_modules/ so a wiped tree reinstalls).
lock_sum=$(sha256sum compat/kafkajs/package-lock.json | cut -d' ' -f1)
if [ "$(cat compat/kafkajs/node_modules/.compat-lock.sha256 2>/dev/null)" != "$lock_sum" ]; then
  (cd compat/kafkajs && npm ci --silent --no-audit --no-fund)
  echo "$lock_sum" > compat/kafkajs/node_modules/.compat-lock.sha256
fi

# Ops suite (tests/ops/): Prometheus + promtool (a real Prometheus scrapes a broker;
# promtool checks deploy/prometheus.yml), strace (checks the systemd unit's syscall
# filter) and PyYAML in .venv/ (tests/ops/requirements.txt). The tests start their own
# Prometheus on a free 127.0.0.1 port; on a machine running systemd the package would
# also start a system instance on :9090, which they do not use.
need_ops_apt=()
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || need_ops_apt+=(prometheus)
command -v strace >/dev/null || need_ops_apt+=(strace)
if ((${#need_ops_apt[@]})); then
  echo "installing Debian packages: ${need_ops_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_ops_apt[@]}"
fi
ops_sum=$(sha256sum tests/ops/requirements.txt | cut -d' ' -f1)
if [ "$(cat .venv/.ops-requirements.sha256 2>/dev/null)" != "$ops_sum" ] ||
   ! .venv/bin/python -c 'import yaml' 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -r tests/ops/requirements.txt
  echo "$ops_sum" > .venv/.ops-requirements.sha256
fi
