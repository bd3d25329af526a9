# The commands CI runs, so local == CI. `make run` and `make test` are the README's two.
SHELL := /bin/bash
CARGO ?= cargo
PYTHON := .venv/bin/python
TERN := target/release/tern

.PHONY: run build build-deps test deps lint unit protocol-test compat ops bench clean

run: build
	mkdir -p data
	$(TERN) serve --data-dir ./data --listen 127.0.0.1:9092

build: build-deps
	$(CARGO) build --release

build-deps:
	bash scripts/install-build-deps.sh

deps:
	bash scripts/install-test-deps.sh

lint: build-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

# Unit tests and the raw-protocol conformance suite (which starts its own broker).
unit: build
	$(CARGO) test --release -- --test-threads=2

protocol-test: build
	$(CARGO) test --release --test protocol -- --test-threads=2

# Real clients against real broker processes.
compat: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) -m pytest compat -q $(if $(CLIENT),-k $(CLIENT),)

# Operations: a real Prometheus scraping a broker, the Grafana dashboard's queries,
# promtool and systemd-analyze on deploy/.
ops: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) -m pytest tests/ops -q

test: deps lint unit compat ops

bench: build
	bash bench/run.sh

clean:
	$(CARGO) clean
	rm -rf data
