"""The installed XGrammar's version, and the versions cfgzip_lab is tested against.

Exactness is defined against the XGrammar the user runs, not one we once read: where two
releases enforce a construct differently (0.2.9's ``\\s`` takes Unicode spaces, 0.2.8's does
not; ``docs/xgrammar_versions.md`` lists every difference found), the code asks
:func:`at_least` here and follows the installed release. A release outside :data:`SUPPORTED`
may differ in ways no test has seen, so first use warns once (:func:`warn_if_unsupported`);
``cfgzip-lab verify`` still runs there and is the referee. The version is also part of every
cache key (:mod:`cfgzip_lab.cache.directory`) and of a class cache's metadata, so classes made under
one release are never served under another.

Only :mod:`importlib.metadata` is imported: reading the version costs no XGrammar import.
"""

from __future__ import annotations

import re
import warnings
from functools import cache
from importlib import metadata

__all__ = [
    "SUPPORTED",
    "XGrammarVersionWarning",
    "installed",
    "installed_tuple",
    "parse",
    "at_least",
    "is_supported",
    "warn_if_unsupported",
]

SUPPORTED: tuple[str, ...] = ("0.2.8", "0.2.9")
"""The XGrammar releases every exactness test runs against (``scripts/test.sh`` runs them under
each); pyproject admits ``>=0.2.8,<0.3``."""


class XGrammarVersionWarning(UserWarning):
    """The installed XGrammar is outside the tested range: masks are unverified there."""


def parse(version: str) -> tuple[int, ...]:
    """The release numbers of ``version``: ``"0.2.9"`` → ``(0, 2, 9)``, ``"0.2.10rc1"`` → ``(0, 2, 10)``.

    Examples
    --------
    >>> parse("0.2.9")
    (0, 2, 9)
    >>> parse("0.3.0.dev2+g1234")
    (0, 3, 0)
    """
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group().split("."))


@cache
def installed() -> str:
    """The installed XGrammar's version string (``"0.2.9"``), read from its distribution's metadata."""
    return metadata.version("xgrammar")


@cache
def installed_tuple() -> tuple[int, ...]:
    """:func:`installed` as numbers, for comparisons."""
    return parse(installed())


def at_least(version: str) -> bool:
    """Whether the installed XGrammar is ``version`` or newer (``at_least("0.2.9")``)."""
    return installed_tuple() >= parse(version)


def is_supported(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed one) is one of :data:`SUPPORTED` (its release
    numbers: a local build ``0.2.9+cu128`` counts as 0.2.9)."""
    numbers = parse(version if version is not None else installed())
    return any(numbers == parse(v) for v in SUPPORTED)


_warned = False


def warn_if_unsupported() -> None:
    """Warn once per process when the installed XGrammar is outside :data:`SUPPORTED`.

    Called where a grammar is first compiled or an engine first built. The warning says what
    to do: run ``cfgzip-lab verify`` on the grammars served, or install a tested release.
    """
    global _warned
    if _warned:
        return
    _warned = True
    if is_supported():
        return
    warnings.warn(
        f"cfgzip_lab is tested against XGrammar {', '.join(SUPPORTED)}; the installed XGrammar is "
        f"{installed()}. Masks may differ from its own where it changed behaviour: check the grammars "
        f"you serve with `cfgzip-lab verify`, or install xgrammar=={SUPPORTED[-1]}.",
        XGrammarVersionWarning,
        stacklevel=3,
    )
