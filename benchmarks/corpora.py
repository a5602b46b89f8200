"""The shared corpora of inputs other projects wrote (``../shared/corpora``), as items to check.

Three corpora, each a folder beside the repository (this module is the one place in
``benchmarks/`` and ``tests/`` that spells their layout):

- ``json-schema-test-suite``: 383 JSON Schemas of json-schema-org/JSON-Schema-Test-Suite
  (``NNNN.json``, a valid instance ``NNNN.instance.json`` where the suite has one) and
  ``xgrammar_0.2.8.tsv``, XGrammar's own verdict on each (355 ``ok``, 28 ``error``);
- ``xgrammar-tests``: 552 grammars of XGrammar's own test suite that xgrammar 0.2.8 parses
  (``SOURCES.txt``: source line and the XGrammar-only features each uses);
- ``regressions``: real-world inputs that broke cfgzip_lab (README there), schemas with
  instances and EBNF grammars.

An :class:`Item` is one schema or grammar with its instance and what the corpus itself records
about it; :func:`seeded_sample` draws the same items for a seed on every machine.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: ``../shared`` beside the checkout, or ``CFGZIP_SHARED`` (as corpus.py, tests/paths.py and test_regex_fsm.py)
CORPORA = Path(os.environ.get("CFGZIP_SHARED", REPO.parent / "shared")) / "corpora"
NAMES = ("json-schema-test-suite", "xgrammar-tests", "regressions")


@dataclass(frozen=True)
class Item:
    """One corpus entry: a JSON Schema or an EBNF grammar, and its valid instance if any."""

    corpus: str
    name: str  # the file name without its suffix: "0042", "test_grammar_parser__L988", "jsb_0038"
    path: Path
    kind: str  # "json_schema" or "ebnf" (compile_grammar's kind)
    instance: Path | None = None
    #: What the corpus records about XGrammar: "ok" / "error: ..." (the schema suite's tsv), "" if nothing.
    xgrammar_listed: str = ""
    features: tuple[str, ...] = ()  # XGrammar-only constructs SOURCES.txt saw (xgrammar-tests)

    @property
    def id(self) -> str:
        return f"{self.corpus}/{self.name}"

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def instance_text(self) -> str | None:
        """The instance as a document to replay: its file without the trailing newline."""
        if self.instance is None:
            return None
        return self.instance.read_text(encoding="utf-8").rstrip("\n")


def _tsv(path: Path) -> list[list[str]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return [line.split("\t") for line in lines[1:]]  # the first remaining line names the columns


def _schema_suite(folder: Path) -> list[Item]:
    verdicts = {}
    if (folder / "xgrammar_0.2.8.tsv").exists():
        for row in _tsv(folder / "xgrammar_0.2.8.tsv"):
            status = row[1]
            message = row[4] if len(row) > 4 else ""
            verdicts[row[0]] = status if status == "ok" else f"{status}: {message}".strip()
    items = []
    for path in sorted(folder.glob("[0-9]*.json")):
        if path.name.endswith(".instance.json"):
            continue
        instance = path.with_name(f"{path.stem}.instance.json")
        items.append(
            Item(
                "json-schema-test-suite",
                path.stem,
                path,
                "json_schema",
                instance if instance.exists() else None,
                verdicts.get(path.stem, ""),
            )
        )
    return items


def _xgrammar_tests(folder: Path) -> list[Item]:
    features: dict[str, tuple[str, ...]] = {}
    sources = folder / "SOURCES.txt"
    if sources.exists():
        for line in sources.read_text(encoding="utf-8").splitlines():
            cols = line.split("\t")
            if len(cols) > 4 and cols[0].endswith(".ebnf"):
                features[cols[0]] = tuple(f for f in cols[4].split(",") if f)
    return [
        Item("xgrammar-tests", p.stem, p, "ebnf", None, "ok", features.get(p.name, ()))
        for p in sorted(folder.glob("*.ebnf"))  # invalid/ (the 96 XGrammar refuses) is not listed
    ]


def _regressions(folder: Path) -> list[Item]:
    items = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".ebnf":
            items.append(Item("regressions", path.stem, path, "ebnf"))
        elif path.suffix == ".json" and not path.name.endswith(".instance.json"):
            instance = path.with_name(f"{path.stem}.instance.json")
            items.append(Item("regressions", path.stem, path, "json_schema", instance if instance.exists() else None))
    return items


_READERS = {"json-schema-test-suite": _schema_suite, "xgrammar-tests": _xgrammar_tests, "regressions": _regressions}


def corpus_items(name: str, root: Path = CORPORA) -> list[Item]:
    """Every item of corpus ``name`` (one of :data:`NAMES`), sorted; ``[]`` where it is not checked out."""
    if name not in _READERS:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(NAMES)}")
    folder = root / name
    return _READERS[name](folder) if folder.is_dir() else []


def find_item(spec: str, root: Path = CORPORA) -> Item:
    """``"regressions/jsb_0038"`` (corpus/name) → its item; KeyError when there is none."""
    corpus, _, name = spec.partition("/")
    for item in corpus_items(corpus, root):
        if item.name == name:
            return item
    raise KeyError(spec)


def seeded_sample(items: list[Item], k: int, seed: int) -> list[Item]:
    """``k`` items drawn without replacement by a seeded RNG, in corpus order (all when k ≥ len)."""
    if k >= len(items):
        return list(items)
    chosen = set(random.Random(seed).sample(range(len(items)), k))
    return [item for i, item in enumerate(items) if i in chosen]


def seeded_order(items: list[Item], seed: int) -> list[Item]:
    """``items`` shuffled by a seeded RNG: any prefix of it is a seeded sample, so a sweep cut
    short at a deadline has still covered a random sample of the corpus, the same on every machine."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return order


if __name__ == "__main__":  # a quick look: how many items each corpus has here
    for corpus in NAMES:
        found = corpus_items(corpus)
        print(f"{corpus}: {len(found)} items, {sum(i.instance is not None for i in found)} with an instance")
    sys.exit(0)
