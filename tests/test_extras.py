"""The extras: one check (``require_extra``) whose message names the extra, and the lists that
say what each extra holds agree (pyproject.toml, ``cfgzip_lab.extras.EXTRAS``, requirements.txt).

``test_core_install.py`` installs the core alone and meets the messages for real."""

from __future__ import annotations

import re

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cfgzip_lab.errors import CfgzipError
from cfgzip_lab.extras import EXTRAS, Extra, MissingExtraError, missing_modules, require_extra
from tests.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# the import name of each distribution an extra brings, where the two differ
IMPORT_NAME = {"railroad-diagrams": "railroad"}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_a_missing_module_is_one_error_naming_the_extra_and_the_pip_command(monkeypatch):
    monkeypatch.setitem(EXTRAS, "probe", Extra("probe", ("json", "cfgzip_no_such_module"), "a probe"))
    with pytest.raises(MissingExtraError) as info:
        require_extra("probe", "the probe feature")
    assert str(info.value) == (
        "the probe feature needs the [probe] extra, which is not installed (missing: cfgzip_no_such_module): "
        "pip install 'cfgzip-lab[probe]'"
    )
    assert isinstance(info.value, CfgzipError) and isinstance(info.value, ImportError)
    assert info.value.extra == "probe" and info.value.missing == ("cfgzip_no_such_module",)
    require_extra("probe", "the probe feature", modules=("json",))  # part of the extra that is there


def test_modules_outside_the_extra_are_refused():
    with pytest.raises(ValueError, match=r"\['plotly'\] are not modules of the \[gguf\] extra"):
        missing_modules("gguf", ("plotly",))


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_checked_extra_is_declared_with_its_modules(extra):
    declared = {IMPORT_NAME.get(n, n.replace("-", "_")) for n in names(PYPROJECT["optional-dependencies"][extra])}
    assert set(EXTRAS[extra].modules) <= declared


def test_the_core_has_none_of_the_workbench_packages():
    core = names(PYPROJECT["dependencies"])
    assert not core & names(PYPROJECT["optional-dependencies"]["workbench"])
    assert not core & {"jupyterlab", "plotly", "ipywidgets", "anywidget", "accelerate", "gguf"}


def test_setup_installs_every_extra_the_package_imports():
    """scripts/setup.sh installs requirements.txt (torch and xgrammar apart): it must hold them all."""
    lines = [re.sub(r"#.*", "", line).strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    installed = names([line for line in lines if line])
    wanted = names(PYPROJECT["dependencies"]) | set().union(
        *(names(PYPROJECT["optional-dependencies"][e]) for e in ("workbench", "hf", "gguf"))
    )
    assert wanted - installed == {"torch", "xgrammar"}
