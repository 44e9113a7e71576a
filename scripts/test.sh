#!/usr/bin/env bash
# The project's test command (README "Quick start"). Every package runs with
# the race detector: nearly all of them have concurrency. -short skips the
# long benchmarks-as-tests; the chaos suite's long schedule is opt-in.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -short -count=1 -timeout 20m ./... "$@"
