#!/usr/bin/env bash
# Resolve the JVM services used by tests and the demo from Maven Central into .cache/<name>/lib.
# Reused when present: a marker file records the pom's hash so an edited pom re-resolves.
# Usage: deploy/local/fetch-jars.sh kafka|hdfs [...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${RLM_CACHE_DIR:-$root/.cache}"
if ! command -v mvn >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fetch-jars: Maven not found; installing Debian's maven package" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  else
    echo "fetch-jars: Maven (mvn) is required to resolve jars from Maven Central; install it" >&2
    exit 2
  fi
fi
for name in "$@"; do
  pom="$here/$name/pom.xml"
  [ -f "$pom" ] || { echo "fetch-jars: no pom for '$name'" >&2; exit 2; }
  lib="$cache/$name/lib"
  stamp="$cache/$name/.pom-sha256"
  want=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -n "$(ls -A "$lib" 2>/dev/null)" ]; then
    continue
  fi
  echo "fetch-jars: resolving $name from Maven Central into $lib" >&2
  rm -rf "$lib"; mkdir -p "$lib"
  mvn -B -q -f "$pom" -Dmaven.repo.local="${RLM_M2_REPO:-$HOME/.m2/repository}" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" >&2
  echo "$want" > "$stamp"
done
