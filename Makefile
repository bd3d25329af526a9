# The commands CI runs, so local == CI. `make run` and `make test` are the README's two.
SHELL := /bin/bash
CARGO ?= cargo
PYTHON := .venv/bin/python
TERN := target/release/tern

.PHONY: run build build-deps test deps lint unit sim protocol-test compat ops durability chaos txn-chaos bench bench-ab fuzz fuzz-build fuzz-seeds clean

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
	python3 tools/import_graph.py --check

# Unit tests and the raw-protocol conformance suite (which starts its own broker).
unit: build
	TERN_ETCD_REQUIRED=1 $(CARGO) test --release -- --test-threads=2

# The replication simulator (src/replication/sim.rs) over SIM_SCHEDULES seeded schedules
# (default 100,000; `make unit` runs 300) from SIM_FIRST_SEED; a failure prints its seed.
SIM_SCHEDULES ?= 100000
sim: build-deps
	SIM_SCHEDULES=$(SIM_SCHEDULES) $(if $(SIM_FIRST_SEED),SIM_FIRST_SEED=$(SIM_FIRST_SEED),) \
		$(CARGO) test --release --lib replication::sim::tests::whole_system_safety -- --nocapture

protocol-test: build
	$(CARGO) test --release --test protocol -- --test-threads=2

# Real clients against real broker processes. The slowest tests are listed at the end:
# compat is most of `make test`'s time.
compat: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) -m pytest compat -q --durations=15 $(if $(CLIENT),-k $(CLIENT),)

# Operations: a real Prometheus scraping a broker, the Grafana dashboard's queries,
# promtool and systemd-analyze on deploy/.
ops: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) -m pytest tests/ops -q

# The durability checker (tools/tern_check.py): 3 brokers on etcd, faults injected while an
# idempotent acks=all producer writes, then every acknowledged message and every replica
# checked. `make compat` (so `make test`) runs its bounded ~90 s run; `durability` runs just that.
durability: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) -m pytest compat/test_durability.py -q -s

# A long run: CHAOS_SECONDS of faults (default 30 min, 200+ faults), CHAOS_SEED to replay a
# schedule, CHAOS_RATE messages/s; the work dir (history, broker logs) is kept and printed.
CHAOS_SECONDS ?= 1800
CHAOS_RATE ?= 1000
chaos: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) tools/tern_check.py --seconds $(CHAOS_SECONDS) --rate $(CHAOS_RATE) \
		--keep $(if $(CHAOS_SEED),--seed $(CHAOS_SEED),)

# The transactional copier checker (tools/txn_check.py) with TXN_FAULTS faults (>= 200).
TXN_FAULTS ?= 200
txn-chaos: build deps
	TERN_BIN=$(CURDIR)/$(TERN) $(PYTHON) tools/txn_check.py --faults $(TXN_FAULTS) \
		--seconds 3600 --messages 200000 $(if $(TXN_SEED),--seed $(TXN_SEED),)

test: deps lint unit compat ops

bench: build
	bash bench/run.sh

# Two builds side by side (single broker and three brokers, alternating): for a change's
# before/after, e.g. A=../old/target/release/tern B=target/release/tern.
ROUNDS ?= 2
bench-ab: build
	bash bench/ab.sh $(A) $(B) $(ROUNDS)

# Fuzzing (fuzz/README.md), not part of `make test`: each cargo-fuzz target for
# FUZZ_SECONDS (default 60), starting from fuzz/seeds and the corpus of earlier runs
# (fuzz/corpus, not committed); fails at the first crash, leaving it in fuzz/artifacts.
# Installs the nightly toolchain and cargo-fuzz when they are missing. The malloc limit
# makes any unguarded large allocation a crash (see src/fuzzing.rs on the allocator).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= request_frame request_body record_batch sasl http_body
FUZZ_FLAGS := -max_total_time=$(FUZZ_SECONDS) -malloc_limit_mb=256 -rss_limit_mb=2048 -print_final_stats=1
fuzz-build: build-deps
	rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) +nightly fuzz build --debug-assertions

fuzz: fuzz-build
	set -e; for target in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus/$$target; \
	  echo "== fuzz $$target for $(FUZZ_SECONDS) s"; \
	  (cd fuzz && $(CARGO) +nightly fuzz run --debug-assertions $$target corpus/$$target seeds/$$target -- $(FUZZ_FLAGS)); \
	  rm -rf $${TMPDIR:-/tmp}/tern-fuzz-log-*; \
	done

# Rewrites fuzz/seeds from src/fuzzing.rs's seeds() (after changing them).
fuzz-seeds:
	rm -rf fuzz/seeds
	$(CARGO) test --release --lib write_fuzz_seeds -- --ignored

clean:
	$(CARGO) clean
	rm -rf data
