# The two commands a newcomer needs (see README):
#   make demo   - install, then tier a generated partition directory on the embedded default
#                 (local directory storage + file metadata store; no broker, no cloud)
#   make test   - install everything (Python env, Kafka and HDFS jars from Maven Central) and run
#                 lint, type checks and the whole test suite against real services
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install jars lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[all]'
	$(PY) -m rlm.log.warmup
	$(PY) -m rlm.compaction.warmup
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/rlm demo

jars:
	bash deploy/local/fetch-jars.sh kafka kafka28 kafka35 kafka39 kafka44 hdfs spark-kafka iceberg-rest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/check_import_cycles.py

typecheck: install
	$(VENV)/bin/mypy

pytest: install jars
	bash scripts/run-pytest.sh $(PYTEST_ARGS)

test: lint typecheck pytest

# The headline benchmarks at a small size (< 15 min): raw results to docs/data/bench-*.json,
# docs/performance.md regenerated, one table printed (see docs/performance.md)
bench: install jars
	$(PY) benchmarks/bench_all.py $(BENCH)

clean:
	rm -rf .it .pytest_cache .mypy_cache .ruff_cache
