#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh), then opens notebooks/workbench.ipynb in JupyterLab.
# Extra arguments go to `jupyter lab`, e.g.: bash scripts/workbench.sh --no-browser --port 8899
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh
# Vocabularies come from installed packages; set HF_HUB_OFFLINE=0 to let Hugging Face download.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
# Containers run as root, where JupyterLab refuses to start without --allow-root.
extra=()
if [ "$(id -u)" = 0 ]; then extra+=(--allow-root); fi
exec .venv/bin/jupyter lab "${extra[@]}" notebooks/workbench.ipynb "$@"
