#!/usr/bin/env bash
# Sets up .venv for testing (scripts/setup.sh --test), then runs the whole test suite, slow and e2e
# tests included, under the newest supported XGrammar (.venv), and then the exactness tests
# (-m exactness: every module that compares with XGrammar, tests/conftest.py) again under each
# older supported release, in the overlay venvs setup.sh made. Extra arguments go to every pytest
# run, e.g.: bash scripts/test.sh -m "not e2e" (CFGZIP_XGRAMMAR_OVERLAYS=0: the .venv run alone).
# The exit status is non-zero when any run failed.
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
status=0
newest=$(.venv/bin/python -c 'from cfgzip_lab import xgrammar_version as v; print(v.installed())')
echo "== the whole suite under XGrammar $newest (.venv)"
# --durations: the 15 slowest tests end the log, so a suite that creeps towards CI's limit shows where.
.venv/bin/python -m pytest "${workers[@]}" --durations=15 "$@" || status=$?
if [ "${CFGZIP_XGRAMMAR_OVERLAYS:-1}" != 0 ]; then
    for overlay in .venv/overlays/xgrammar-*/bin/python; do
        [ -x "$overlay" ] || continue
        release=$("$overlay" -c 'from cfgzip_lab import xgrammar_version as v; print(v.installed())')
        echo "== the exactness tests under XGrammar $release ($overlay)"
        "$overlay" -m pytest "${workers[@]}" --durations=5 "$@" -m exactness || status=$?
    done
fi
exit "$status"
