#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh), then opens notebooks/workbench.ipynb in JupyterLab.
# Extra arguments go to `jupyter lab`, e.g.: bash scripts/workbench.sh --no-browser --port 8899
#
# Using the workbench leaves `git status` clean:
# - a server-side pre-save hook writes the repository's tracked notebooks as committed (no
#   outputs, execution counts or widget state), whatever saves them: autosave, Ctrl-S, the API
#   (cfgzip_lab/widgets/_jupyter_hooks.py says why a hook rather than autosave off);
# - checkpoints go to the user's cache, not to .ipynb_checkpoints/ beside the notebooks, one
#   folder per notebook folder (cfgzip_lab/widgets/_jupyter_checkpoints.py);
# - exports default to exports/ at the repo root (git-ignored), the draft to the user's cache.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh
# Vocabularies come from installed packages; set HF_HUB_OFFLINE=0 to let Hugging Face download.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
checkpoints="${XDG_CACHE_HOME:-$HOME/.cache}/cfgzip_lab/ipynb_checkpoints"
mkdir -p "$checkpoints"
extra=(
  --FileContentsManager.pre_save_hook=cfgzip_lab.widgets._jupyter_hooks.strip_tracked_notebook
  --FileContentsManager.checkpoints_class=cfgzip_lab.widgets._jupyter_checkpoints.MirroredCheckpoints
  --AsyncFileContentsManager.checkpoints_class=cfgzip_lab.widgets._jupyter_checkpoints.AsyncMirroredCheckpoints
  "--FileCheckpoints.checkpoint_dir=$checkpoints"
)
# Containers run as root, where JupyterLab refuses to start without --allow-root.
if [ "$(id -u)" = 0 ]; then extra+=(--allow-root); fi
exec .venv/bin/jupyter lab "${extra[@]}" notebooks/workbench.ipynb "$@"
