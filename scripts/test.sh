#!/usr/bin/env bash
# The project's test command (README "Quick start"). Every package runs with
# the race detector: nearly all of them have concurrency. -short skips the
# long benchmarks-as-tests and the chaos schedules, which then run on their
# own; the chaos suite's long schedule is opt-in (-chaos.duration=30m).
set -euo pipefail
cd "$(dirname "$0")/.."
# -p 1: packages one at a time, so multi-server tests never compete with
# each other for the two cores (elections under starvation cause flakes).
go test -race -short -count=1 -p 1 -timeout 30m ./... "$@"
# The chaos suite's short schedule: every nemesis once, all checkers
# (in-process always; with real processes in network namespaces as root).
# No -chaos.seed: each schedule (TestChaos_InProcess, TestChaos_Netns,
# TestChaos_NetnsWAL) takes a new random seed on every run, printed at its
# start ("=== chaos <test>: seed N (replay: ...)", shown when it fails or
# times out) with the command that replays it.
go test -race -count=1 -timeout 15m -run 'TestChaos_(InProcess|Netns|NetnsWAL|NetnsNodeLoss|CheckSavedHistory)$' ./integration/chaos/
# The fencing nemeses (issue 39): real writer processes on a fence-policy
# volume while the agent is killed, paused, restarted, its fence command
# fails or hangs, or it returns after a force detach; no two writers may
# overlap.
go test -race -count=1 -timeout 12m -run 'TestChaos_(NetnsFencing|InProcessFencing)$' ./integration/chaos/
