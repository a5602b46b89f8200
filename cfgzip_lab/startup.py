"""Start-up side by side: XGrammar's compile and our ready time for one grammar or JSON Schema.

``cfgzip-lab bench --startup GRAMMAR`` (and ``benchmarks/startup.py`` over the bundled grammars
and JSON Schemas, one process per input) run :func:`measure_startup`, which times in one warm
process, after both sides have compiled a tiny grammar once (imports, tokenizer tables):

- **XGrammar**: ``GrammarCompiler.compile_grammar`` (``compile_json_schema`` for a schema; its
  own cache off), and ready = compile + a matcher + its first mask;
- **ours, cold** (nothing cached): front end (GBNF/schema → EBNF → GNF), classing, σ_in index,
  native engine, first mask (through :class:`cfgzip_lab.cache.grammars.GrammarCache` over an
  empty cache directory, as a server's request meets it; writing the entry there, which only a
  build slower than ``GrammarCache.write_after`` does, is timed apart and not counted; the
  ``GrammarCache`` is made before the clock starts, as XGrammar's ``GrammarCompiler`` is: a
  server makes each once);
- **ours, warm**: the same from that cache directory in a fresh :class:`GrammarCache` (no front
  end, no classing; the entry is written for it whatever the build took);

each side the median of ``repeats`` runs (3; on a loaded 2-core machine a single run can be off
by 10x: the first GNF of json took 0.46 s once where it takes 20 ms);
- the **break-even**: decode tokens after which our ready time is paid back by the native
  engine's cheaper steps (:func:`cfgzip_lab.bench.break_even` on the difference of ready times
  and the per-token medians of plain XGrammar and the native engine, mask + accept, over up to
  ``steps`` tokens of the grammar's sample document, the schema's instance, or a walk).

Wall-clock seconds; the ratios are what to read (both sides ran on the same machine at the same
moment). Nothing here asserts on time.
"""

from __future__ import annotations

import gc
import math
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .vocab import VocabTable

__all__ = ["StartupResult", "measure_startup", "format_rows", "pays_after"]

# Warm-up inputs: small, but through the same code paths as the inputs timed (strings, arrays, bounds
# past COUNTED_THRESHOLD, which become counted repetitions): a first array schema in a process paid
# ~29 ms of first use of a 37 ms start (maxItems 40 on integers) after a warm-up without them
_WARM_UP = 'root ::= "a" [0-9]* "b" [a-c]{2,20}\n'
_WARM_UP_SCHEMA = (
    '{"type": "object", "properties": {"w": {"type": "integer"}, "s": {"type": "string", "maxLength": 20},'
    ' "a": {"type": "array", "items": {"type": "boolean"}, "maxItems": 20}}}'
)


@dataclass
class StartupResult:
    """One input's start-up, in seconds (see the module doc); ``None`` where a side refused it."""

    name: str
    kind: str
    xgrammar_compile_s: float
    xgrammar_ready_s: float
    cold: dict[str, float] = field(default_factory=dict)  # front_end, classes, index, compact, engine, first_mask
    cold_ready_s: float = 0.0
    cold_write_s: float = 0.0
    warm_ready_s: float = 0.0
    warm: dict[str, float] = field(default_factory=dict)  # load, engine, first_mask (the median run)
    plain_step_us: float = 0.0
    native_step_us: float = 0.0
    steps: int = 0
    classes: int = 0
    index_source: str = ""
    fallback: str | None = None  # why the native engine serves through the compressed one, if it does

    @property
    def cold_ratio(self) -> float:
        return self.cold_ready_s / self.xgrammar_compile_s

    @property
    def warm_ratio(self) -> float:
        return self.warm_ready_s / self.xgrammar_compile_s

    def pays_after(self, ready_s: float) -> int | str:
        return pays_after(ready_s, self.xgrammar_ready_s, self.plain_step_us * 1e-6, self.native_step_us * 1e-6)

    def behind_after(self, ready_s: float) -> int | None:
        return behind_after(ready_s, self.xgrammar_ready_s, self.plain_step_us * 1e-6, self.native_step_us * 1e-6)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            cold_ratio=round(self.cold_ratio, 4),
            warm_ratio=round(self.warm_ratio, 4),
            cold_pays_after_tokens=self.pays_after(self.cold_ready_s),
            warm_pays_after_tokens=self.pays_after(self.warm_ready_s),
            cold_behind_after_tokens=self.behind_after(self.cold_ready_s),
            warm_behind_after_tokens=self.behind_after(self.warm_ready_s),
        )
        return d


def pays_after(ours_s: float, xgrammar_s: float, plain_step_s: float, native_step_s: float) -> int | str:
    """Tokens after which ours is ahead of plain XGrammar (ready time plus that many steps): 0 when
    it is ready first, else the extra start-up over the per-token saving
    (:func:`cfgzip_lab.bench.break_even`; ``"never"`` when the native step saves nothing).
    Ready first but slower per step: 0, and :func:`behind_after` says for how long."""
    from .bench import break_even

    if ours_s <= xgrammar_s:
        return 0
    return break_even(ours_s - xgrammar_s, plain_step_s, native_step_s)


def behind_after(ours_s: float, xgrammar_s: float, plain_step_s: float, native_step_s: float) -> int | None:
    """For an engine ready first but slower per step: the tokens after which plain XGrammar has
    caught up; None otherwise."""
    if ours_s > xgrammar_s or native_step_s <= plain_step_s:
        return None
    return math.floor((xgrammar_s - ours_s) / (native_step_s - plain_step_s) + 1e-9)  # 1e-9: float noise


def _xgrammar_compiler(vocab: VocabTable):
    import xgrammar as xgr

    from .engine import plain_tokenizer_info

    return xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False)


def _xgrammar_ready(compiler, ebnf: str, schema: str | None, vocab_size: int) -> tuple[float, float]:
    import xgrammar as xgr

    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(schema) if schema is not None else compiler.compile_grammar(ebnf)
    t1 = time.perf_counter()
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return t1 - t0, time.perf_counter() - t0


def _ours(
    text: str, kind: str, vocab: VocabTable, folder: Path, write_after: float | None = None
) -> tuple[float, dict, object]:
    from .cache.grammars import GrammarCache

    cache = GrammarCache(1, cache_dir=folder, write_after=write_after)  # (not timed: see the module doc)
    t0 = time.perf_counter()
    ready = cache.get(text, vocab, kind=kind)
    matcher = ready.matcher()
    t1 = time.perf_counter()
    matcher.vocab_row()
    t2 = time.perf_counter()
    stages = {k: v for k, v in ready.seconds.items() if k != "write"}
    stages["first_mask"] = t2 - t1
    total = t2 - t0 - ready.seconds.get("write", 0.0)
    return total, stages, ready


def measure_startup(
    text: str,
    vocab: VocabTable,
    *,
    kind: str = "auto",
    name: str = "",
    docs: list[str] | None = None,
    steps: int = 48,
    repeats: int = 3,
) -> StartupResult:
    """Time one grammar or schema both ways in this process (see the module doc)."""
    from .cache.grammars import resolve_input
    from .grammar.sources import to_ebnf

    text, kind = resolve_input(text, kind)
    schema = text if kind == "json_schema" else None
    ebnf = to_ebnf(text, kind).ebnf if kind != "ebnf" else text
    compiler = _xgrammar_compiler(vocab)
    with tempfile.TemporaryDirectory(prefix="cfgzip-startup-") as tmp:
        # Warm-up: both sides once on a tiny input of the same kind (imports, first-use tables).
        warm_text = _WARM_UP_SCHEMA if schema is not None else _WARM_UP
        _xgrammar_ready(compiler, _WARM_UP, warm_text if schema is not None else None, vocab.vocab_size)
        _ours(warm_text, "json_schema" if schema is not None else "ebnf", vocab, Path(tmp) / "warm-up")
        # The imports (xgrammar, numpy, ...) leave ~200k objects for the cyclic collector's first full
        # pass (~150 ms): a warm process has had it, so it is not charged to whichever run comes first.
        gc.collect()
        xgr = [_xgrammar_ready(compiler, ebnf, schema, vocab.vocab_size) for _ in range(repeats)]
        compile_s = median(c for c, _ in xgr)
        xgr_ready_s = median(r for _, r in xgr)
        # Cold: each run in an empty folder with a fresh GrammarCache (nothing of the grammar is
        # kept between runs); the median run is reported, as for the other two sides.
        cold_runs = sorted(
            (_ours(text, kind, vocab, Path(tmp) / f"cold{i}") for i in range(repeats)), key=lambda r: r[0]
        )
        cold_s, cold, ready = cold_runs[len(cold_runs) // 2]
        folder = Path(tmp) / "cache"
        # The entry the warm runs read, written even where the build was quicker than the policy's
        # bound (GrammarCache.write_after: such an entry loads slower than it builds, the column shows it)
        _ours(text, kind, vocab, folder, write_after=0.0)
        warm_runs = sorted((_ours(text, kind, vocab, folder) for _ in range(repeats)), key=lambda r: r[0])
        warm_s, warm, warm_ready = warm_runs[len(warm_runs) // 2]
        if warm_ready.origin != "disk":  # pragma: no cover - the entry was just written
            raise RuntimeError("the warm start did not read the cache directory")
        result = StartupResult(
            name=name or kind,
            kind=kind,
            xgrammar_compile_s=compile_s,
            xgrammar_ready_s=xgr_ready_s,
            cold=cold,
            cold_ready_s=cold_s,
            cold_write_s=ready.seconds.get("write", 0.0),
            warm_ready_s=warm_s,
            warm=warm,
            classes=ready.classes.num_classes,
            index_source=warm_ready.engine.index_source,
            fallback=warm_ready.engine.unavailable,
        )
        _time_steps(result, warm_ready, ebnf, vocab, docs or [], steps)
    return result


def _time_steps(result: StartupResult, ready, ebnf: str, vocab: VocabTable, docs: list[str], steps: int) -> None:
    """Median per-token cost (mask + accept) of plain XGrammar and the native engine on one path."""
    from .bench import token_paths
    from .engine import compile_engines

    engines = compile_engines(ebnf, vocab, ready.classes)
    paths = token_paths(engines, docs, steps=steps, seed=0, walks=1)
    path = [t for p in paths for t in p][:steps]
    plain, native = engines.plain(), ready.matcher()
    bitmask = plain.allocate_bitmask(1)
    native_mask = native.allocate_bitmask(1)
    plain_us, native_us = [], []
    for token in path:
        t0 = time.perf_counter()
        plain.fill_next_token_bitmask(bitmask, 0)
        ok_plain = plain.accept_token(token)
        t1 = time.perf_counter()
        native.fill_next_token_bitmask(native_mask, 0)
        ok_native = native.accept_token(token)
        t2 = time.perf_counter()
        if not (ok_plain and ok_native):  # pragma: no cover - both engines are exact
            raise RuntimeError(f"token {token} accepted by one engine only (plain {ok_plain}, native {ok_native})")
        plain_us.append((t1 - t0) * 1e6)
        native_us.append((t2 - t1) * 1e6)
    result.steps = len(path)
    result.plain_step_us = median(plain_us) if plain_us else 0.0
    result.native_step_us = median(native_us) if native_us else 0.0


def _ms(s: float) -> str:
    return f"{s * 1e3:,.1f}" if s < 10 else f"{s * 1e3:,.0f}"


def format_rows(results: list[StartupResult]) -> list[str]:
    """The table: times in ms, ratios ours ÷ XGrammar's compile, break-even in tokens."""
    head = (
        f"{'input':<28} {'XGr compile':>11} {'XGr ready':>9} | {'ours cold':>9} {'front':>7} {'classes':>8} "
        f"{'index':>7} {'engine+mask':>11} {'÷XGr':>6} | {'ours warm':>9} {'÷XGr':>6} | "
        f"{'step XGr/ours µs':>17} | {'pays after (cold / warm)':>25}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        c = r.cold
        lines.append(
            f"{r.name[:28]:<28} {_ms(r.xgrammar_compile_s):>11} {_ms(r.xgrammar_ready_s):>9} | "
            f"{_ms(r.cold_ready_s):>9} {_ms(c.get('front_end', 0)):>7} {_ms(c.get('classes', 0)):>8} "
            f"{_ms(c.get('index', 0)):>7} {_ms(c.get('compact', 0) + c.get('engine', 0) + c.get('first_mask', 0)):>11} "
            f"{r.cold_ratio:>5.2f}x | {_ms(r.warm_ready_s):>9} {r.warm_ratio:>5.2f}x | "
            f"{r.plain_step_us:>8.0f} / {r.native_step_us:<6.0f} | "
            f"{_pays(r, r.cold_ready_s):>11} / {_pays(r, r.warm_ready_s):<11}"
        )
    return lines


def _pays(r: StartupResult, ready_s: float) -> str:
    n = r.pays_after(ready_s)
    if isinstance(n, str):
        return n
    behind = r.behind_after(ready_s)
    return f"{n:,}" if behind is None else f"0, behind after {behind:,}"
