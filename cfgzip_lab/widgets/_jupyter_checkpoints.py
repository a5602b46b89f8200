"""Notebook checkpoints kept in the user's cache, one folder per notebook folder.

``scripts/workbench.sh`` keeps checkpoints out of the repository (so using the workbench leaves
``git status`` clean). Jupyter's own ``FileCheckpoints`` with an absolute ``checkpoint_dir``
puts every folder's checkpoints into that one directory, named by the notebook's file name
only: ``a/draft.ipynb`` and ``b/draft.ipynb`` would share a checkpoint, and "Revert to
checkpoint" on one could bring back the other's cells. Here the cache mirrors each
notebook's absolute folder, so every notebook on the machine (other clones included) has
its own.
"""

from __future__ import annotations

import os

from jupyter_core.utils import ensure_dir_exists
from jupyter_server.services.contents.filecheckpoints import AsyncFileCheckpoints, FileCheckpoints

__all__ = ["AsyncMirroredCheckpoints", "MirroredCheckpoints"]


class MirroredCheckpoints(FileCheckpoints):
    """``FileCheckpoints`` whose absolute ``checkpoint_dir`` mirrors the notebooks' folders."""

    def checkpoint_path(self, checkpoint_id: str, path: str) -> str:
        """``<checkpoint_dir>/<the notebook's absolute folder>/<name>-<id><ext>``."""
        if not os.path.isabs(self.checkpoint_dir):  # relative: Jupyter's own layout beside the notebook
            return super().checkpoint_path(checkpoint_id, path)
        parent, name = ("/" + path.strip("/")).rsplit("/", 1)
        folder = os.path.realpath(self._get_os_path(path=parent.strip("/")))
        basename, ext = os.path.splitext(name)
        cp_dir = os.path.join(self.checkpoint_dir, os.path.splitdrive(folder)[1].lstrip(os.sep))
        with self.perm_to_403():
            ensure_dir_exists(cp_dir)
        return os.path.join(cp_dir, f"{basename}-{checkpoint_id}{ext}")


class AsyncMirroredCheckpoints(MirroredCheckpoints, AsyncFileCheckpoints):
    """The same layout for the async contents manager (the one ``jupyter lab`` runs)."""
