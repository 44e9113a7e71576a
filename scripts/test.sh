#!/usr/bin/env bash
# The project's test command (README "Quick start"). Every package runs with
# the race detector: nearly all of them have concurrency. -short skips the
# long benchmarks-as-tests; the chaos suite's long schedule is opt-in.
set -euo pipefail
cd "$(dirname "$0")/.."
# -p 1: packages one at a time, so multi-server tests never compete with
# each other for the two cores (elections under starvation cause flakes).
go test -race -short -count=1 -p 1 -timeout 30m ./... "$@"
