#!/usr/bin/env bash
# Sets up .venv for testing (scripts/setup.sh --test), then runs the whole test suite,
# slow and e2e tests included. Extra arguments go to pytest, e.g.: bash scripts/test.sh -m "not e2e"
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh --test
# Vocabularies come from installed packages; set HF_HUB_OFFLINE=0 to let Hugging Face download.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
# Two pytest-xdist workers by default (CI and this kind of machine have 2 cores; the serial run
# took 26.5 minutes in CI, two workers about 18). CFGZIP_TEST_WORKERS=0 runs serially; an explicit
# -n/--numprocesses among the arguments wins.
workers=(-n "${CFGZIP_TEST_WORKERS:-2}")
for arg in "$@"; do
    case "$arg" in -n|-n*|--numprocesses|--numprocesses=*) workers=() ;; esac
done
# --durations: the 15 slowest tests end the log, so a suite that creeps towards CI's limit shows where.
exec .venv/bin/python -m pytest "${workers[@]}" --durations=15 "$@"
