#!/usr/bin/env bash
# Run the whole test suite (all tiers: the fixtures start real Kafka, S3, HDFS and Spark).
# pytest's exit status 5 ("no tests collected") is a failure here, never a silent success.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=0
.venv/bin/python -m pytest -p no:cacheprovider --durations=30 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-pytest: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
