"""The shared corpora of inputs other projects wrote (``../shared/corpora``), as items to check.

Four corpora, each a folder beside the repository (this module is the one place in
``benchmarks/`` and ``tests/`` that spells their layout):

- ``json-schema-test-suite``: 383 JSON Schemas of json-schema-org/JSON-Schema-Test-Suite
  (``NNNN.json``, a valid instance ``NNNN.instance.json`` where the suite has one) and
  ``xgrammar_0.2.8.tsv``, XGrammar's own verdict on each (355 ``ok``, 28 ``error``);
- ``xgrammar-tests``: 552 grammars of XGrammar's own test suite that xgrammar 0.2.8 parses
  (``SOURCES.txt``: source line and the XGrammar-only features each uses);
- ``regressions``: real-world inputs that broke cfgzip_lab (README there), schemas with
  instances and EBNF grammars;
- ``maskbench``: MaskBench's 10,282 real-world schemas (JSONSchemaBench) in one
  ``maskbench.jsonl.gz``, each with valid instances (to be accepted to the end) and invalid
  ones (to be refused); not part of ``--corpora all`` (:data:`NAMES`), sampled by split
  (:func:`stratified_sample`).

An :class:`Item` is one schema or grammar with its instance(s) and what the corpus itself
records about it; :func:`seeded_sample` draws the same items for a seed on every machine.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: ``../shared`` beside the checkout, or ``CFGZIP_SHARED`` (as corpus.py, tests/paths.py and test_regex_fsm.py)
CORPORA = Path(os.environ.get("CFGZIP_SHARED", REPO.parent / "shared")) / "corpora"
NAMES = ("json-schema-test-suite", "xgrammar-tests", "regressions")
MASKBENCH = "maskbench"
#: Every corpus a sweep can name; ``--corpora all`` is :data:`NAMES` (MaskBench is sampled on its own).
ALL_NAMES = (*NAMES, MASKBENCH)


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
    source: str | None = None  # the schema's text where the corpus keeps it inside one file (maskbench)
    #: MaskBench's test instances, each ``(valid, document)``: valid ones must be accepted to their end,
    #: invalid ones refused (where XGrammar refuses them).
    tests: tuple[tuple[bool, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.corpus}/{self.name}"

    @property
    def stratum(self) -> str:
        """The part of its corpus the item comes from: MaskBench's split (``Github_easy``,
        ``BFCL_simple``), the corpus name elsewhere."""
        if self.corpus != MASKBENCH:
            return self.corpus
        return self.name.split("---")[0] if "---" in self.name else self.name.rsplit("_", 1)[0]

    def text(self) -> str:
        return self.source if self.source is not None else self.path.read_text(encoding="utf-8")

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


def instance_document(data: object) -> str:
    """A MaskBench test instance as the text to replay: ``json.dumps(data)`` as MaskBench's runner
    writes it (``indent=None``, non-ASCII characters kept)."""
    return json.dumps(data, ensure_ascii=False, indent=None)


def _maskbench(folder: Path) -> list[Item]:
    path = folder / "maskbench.jsonl.gz"
    if not path.exists():
        return []
    items = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            name = row["name"].removesuffix(".json")
            tests = tuple((bool(t["valid"]), instance_document(t["data"])) for t in row.get("tests", []))
            source = json.dumps(row["schema"], ensure_ascii=False)
            items.append(Item(MASKBENCH, name, path, "json_schema", source=source, tests=tests))
    return sorted(items, key=lambda item: item.name)


_READERS = {
    "json-schema-test-suite": _schema_suite,
    "xgrammar-tests": _xgrammar_tests,
    "regressions": _regressions,
    MASKBENCH: _maskbench,
}


def corpus_items(name: str, root: Path = CORPORA) -> list[Item]:
    """Every item of corpus ``name`` (one of :data:`ALL_NAMES`), sorted; ``[]`` where it is not checked out."""
    if name not in _READERS:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(ALL_NAMES)}")
    return list(_read_corpus(name, root))


@cache
def _read_corpus(name: str, root: Path) -> tuple[Item, ...]:
    folder = root / name
    return tuple(_READERS[name](folder)) if folder.is_dir() else ()


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


def stratified_sample(items: list[Item], k: int, seed: int, stratum: Callable[[Item], str] | None = None) -> list[Item]:
    """``k`` items drawn by a seeded RNG in proportion to the strata (``Item.stratum`` by default:
    MaskBench's splits), in corpus order; every stratum gets its share rounded by largest
    remainder, so a 1,000-item sample of MaskBench holds ~184 Github_medium and ~16 BFCL_parallel.
    """
    if k >= len(items):
        return list(items)
    key = stratum or (lambda item: item.stratum)
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    exact = {name: k * len(members) / len(items) for name, members in groups.items()}
    quota = {name: int(share) for name, share in exact.items()}
    by_remainder = sorted(groups, key=lambda name: (-(exact[name] - quota[name]), name))
    for name in by_remainder[: k - sum(quota.values())]:
        quota[name] += 1
    rng = random.Random(seed)
    chosen: set[int] = set()
    for name in sorted(groups):
        chosen.update(rng.sample(groups[name], quota[name]))
    return [item for i, item in enumerate(items) if i in chosen]


def seeded_order(items: list[Item], seed: int) -> list[Item]:
    """``items`` shuffled by a seeded RNG: any prefix of it is a seeded sample, so a sweep cut
    short at a deadline has still covered a random sample of the corpus, the same on every machine."""
    order = list(items)
    random.Random(seed).shuffle(order)
    return order


def interleaved(parts: list[list[Item]]) -> list[Item]:
    """The lists merged so that every prefix holds each in proportion to its length (each keeps
    its own order): a seeded order of several corpora, cut anywhere, samples every corpus."""
    keyed = [((i + 0.5) / len(part), p, item) for p, part in enumerate(parts) for i, item in enumerate(part)]
    return [item for _, _, item in sorted(keyed, key=lambda k: (k[0], k[1]))]


if __name__ == "__main__":  # a quick look: how many items each corpus has here
    for corpus in ALL_NAMES:
        found = corpus_items(corpus)
        with_instances = sum(i.instance is not None or bool(i.tests) for i in found)
        print(f"{corpus}: {len(found)} items, {with_instances} with an instance")
    sys.exit(0)
