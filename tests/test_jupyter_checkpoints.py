"""Checkpoints outside the tree, one per notebook: two notebooks with the same name in two
folders must never restore each other's cells (Jupyter's FileCheckpoints with an absolute
checkpoint_dir keys them by file name only)."""

from __future__ import annotations

import asyncio

import nbformat
from jupyter_server.services.contents.filemanager import AsyncFileContentsManager, FileContentsManager

from cfgzip_lab.widgets._jupyter_checkpoints import AsyncMirroredCheckpoints, MirroredCheckpoints


def _manager(root, cache, checkpoints_class, manager_class=FileContentsManager):
    manager = manager_class(root_dir=str(root), checkpoints_class=checkpoints_class)
    manager.checkpoints.checkpoint_dir = str(cache)
    return manager


def _model(source: str) -> dict:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    return {"type": "notebook", "format": "json", "content": nb}


def _save(manager, path: str, source: str) -> None:
    manager.save(_model(source), path)


def _source(manager, path: str) -> str:
    return manager.get(path)["content"]["cells"][0]["source"]


def _checkpoint_then_edit_both(manager) -> None:
    for folder in ("a", "b"):
        manager.new({"type": "directory"}, folder)
        _save(manager, f"{folder}/draft.ipynb", f"checkpointed {folder}")
        manager.create_checkpoint(f"{folder}/draft.ipynb")
        _save(manager, f"{folder}/draft.ipynb", f"edited {folder}")


def test_same_named_notebooks_in_two_folders_keep_their_own_checkpoints(tmp_path):
    root, cache = tmp_path / "tree", tmp_path / "cache"
    root.mkdir()
    manager = _manager(root, cache, MirroredCheckpoints)
    _checkpoint_then_edit_both(manager)
    for folder in ("a", "b"):
        [checkpoint] = manager.list_checkpoints(f"{folder}/draft.ipynb")
        manager.restore_checkpoint(checkpoint["id"], f"{folder}/draft.ipynb")
        assert _source(manager, f"{folder}/draft.ipynb") == f"checkpointed {folder}"
    assert not list(root.rglob("*checkpoint*")), "checkpoints must stay out of the tree"
    assert {p.parent.name for p in cache.rglob("draft-*.ipynb")} == {"a", "b"}
    assert str((root / "a").resolve()).lstrip("/") in str(next(cache.rglob("a/draft-*.ipynb")))


def test_a_relative_checkpoint_dir_keeps_jupyters_layout(tmp_path):
    manager = _manager(tmp_path, ".ipynb_checkpoints", MirroredCheckpoints)
    manager.new({"type": "directory"}, "a")
    _save(manager, "a/draft.ipynb", "x")
    manager.create_checkpoint("a/draft.ipynb")
    assert list((tmp_path / "a" / ".ipynb_checkpoints").glob("draft-*.ipynb"))


def test_the_async_manager_jupyter_lab_runs_keeps_them_apart_too(tmp_path):
    root, cache = tmp_path / "tree", tmp_path / "cache"
    root.mkdir()
    manager = _manager(root, cache, AsyncMirroredCheckpoints, AsyncFileContentsManager)

    async def scenario() -> list[str]:
        for folder in ("a", "b"):
            await manager.new({"type": "directory"}, folder)
            await manager.save(_model(f"checkpointed {folder}"), f"{folder}/draft.ipynb")
            await manager.create_checkpoint(f"{folder}/draft.ipynb")
            await manager.save(_model(f"edited {folder}"), f"{folder}/draft.ipynb")
        restored = []
        for folder in ("a", "b"):
            [checkpoint] = await manager.list_checkpoints(f"{folder}/draft.ipynb")
            await manager.restore_checkpoint(checkpoint["id"], f"{folder}/draft.ipynb")
            restored.append((await manager.get(f"{folder}/draft.ipynb"))["content"]["cells"][0]["source"])
        return restored

    assert asyncio.run(scenario()) == ["checkpointed a", "checkpointed b"]
