"""Per-step mask cost, plain XGrammar vs the compressed engine, measured side by side.

A pure core for ``cfgzip-lab bench`` and ``benchmarks/``: nothing here prints, and nothing
is ever asserted on wall time. The replay:

1. Token paths: the documents given (tokenized with ``vocab.encode``), else the grammar's
   samples, else seeded random walks driven by the plain matcher. Documents are replayed
   whole; ``steps`` timed steps are spread evenly over all their positions. A document's
   head is not a fair sample of it: the C-like samples open with comments and ``#include``
   lines, where plain XGrammar's fill takes 1.2 ms at the median (first 24 tokens of each)
   against 58 ms in the code after them (Llama-3 vocabulary).
2. For each batch size B, B plain and B compressed matchers (XGrammar's
   ``BatchGrammarMatcher`` for B > 1, a single matcher for B = 1: what a decode loop uses)
   replay the same paths; at every timed step, one after the other in the same process:

   - plain fill                     (vocabulary bitmask, ``fill_next_token_bitmask``)
   - plain apply                    (``apply_token_bitmask_inplace`` on float32 logits (B, V))
   - compressed fill                (class bitmask)
   - compressed expand              (packed vocabulary bitmask, what vLLM/SGLang would take)
   - compressed expand + apply      (:meth:`Expander.mask_logits_` on the same logits)

   - native fill                    (the native engine's mask IS the packed vocabulary mask)
   - native apply                   (``apply_token_bitmask_inplace`` with that mask)

   then every row of every engine accepts the path's next token (timed at the same steps).
   ``engine_names`` picks the engines (plain and compressed by default; ``"native"`` adds
   :mod:`cfgzip_lab.native`); an engine left out has NaN quantiles.
3. Median and p90 of each, and two ratios at median and p90 (ratios of the two
   distributions' quantiles, not of paired steps): plain fill / compressed (fill + expand),
   the speed-up this project reports, and plain (fill + apply) / compressed (fill + expand + apply).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .bundled import bundled_samples
from .engine import CompiledEngines, compile_engines
from .expand import Expander, pack_bool_mask, unpack_bitmask

if TYPE_CHECKING:
    from .classes.classing import TokenClasses
    from .vocab import VocabTable

__all__ = [
    "Quantiles",
    "BatchBench",
    "EngineBench",
    "E2EBench",
    "token_paths",
    "timed_positions",
    "bench_engines",
    "bench_e2e",
    "machine_info",
    "sample_docs",
    "time_expansion",
    "NEVER",
    "break_even",
    "one_off_seconds",
    "pays_text",
]


@dataclass(frozen=True)
class Quantiles:
    """Median and p90 of per-step times, in microseconds."""

    median_us: float
    p90_us: float

    @staticmethod
    def of(seconds: Sequence[float]) -> Quantiles:
        us = np.asarray(seconds, dtype=np.float64) * 1e6
        if us.size == 0:
            return Quantiles(float("nan"), float("nan"))
        return Quantiles(float(np.median(us)), float(np.percentile(us, 90)))


@dataclass
class BatchBench:
    """One batch size: per-step quantiles of the four measurements and the ratios."""

    batch: int
    steps: int
    plain_fill: Quantiles
    plain_total: Quantiles  # fill + apply to the logits
    compressed_fill: Quantiles
    compressed_expanded: Quantiles  # fill + expansion to a packed vocabulary bitmask
    compressed_total: Quantiles  # fill + expansion applied to the logits
    expansion: dict[str, Any] = field(default_factory=dict)
    native_fill: Quantiles = Quantiles(float("nan"), float("nan"))  # packed vocabulary mask
    native_total: Quantiles = Quantiles(float("nan"), float("nan"))  # fill + apply to the logits
    plain_accept: Quantiles = Quantiles(float("nan"), float("nan"))
    compressed_accept: Quantiles = Quantiles(float("nan"), float("nan"))
    native_accept: Quantiles = Quantiles(float("nan"), float("nan"))
    native_stats: dict[str, Any] = field(default_factory=dict)

    def mask_quantiles(self, engine: str) -> Quantiles:
        """The engine's packed vocabulary mask per step: plain fill, compressed fill + expand, native fill."""
        return {"plain": self.plain_fill, "compressed": self.compressed_expanded, "native": self.native_fill}[engine]

    def total_quantiles(self, engine: str) -> Quantiles:
        """The engine's mask applied to float32 logits per step (plain fill + apply, compressed
        fill + expansion applied, native fill + apply): what ``*_total_*`` always meant here."""
        return {"plain": self.plain_total, "compressed": self.compressed_total, "native": self.native_total}[engine]

    def summary(self, engine_names: Sequence[str]) -> dict[str, float]:
        """Per engine E: ``E_total_median_us`` / ``E_total_p90_us`` (mask applied to the logits),
        ``E_mask_median_us`` / ``E_mask_p90_us`` (the packed vocabulary mask alone),
        ``E_accept_median_us``; and the native ratios, on the packed mask (the measure the project reports)."""
        out: dict[str, float] = {}
        for e in engine_names:
            t, q = self.total_quantiles(e), self.mask_quantiles(e)
            out[f"{e}_total_median_us"] = round(t.median_us, 2)
            out[f"{e}_total_p90_us"] = round(t.p90_us, 2)
            out[f"{e}_mask_median_us"] = round(q.median_us, 2)
            out[f"{e}_mask_p90_us"] = round(q.p90_us, 2)
            out[f"{e}_accept_median_us"] = round(getattr(self, f"{e}_accept").median_us, 2)
        if "native" in engine_names:
            n = self.native_fill
            if "plain" in engine_names:
                out["native_vs_plain_median"] = round(self.plain_fill.median_us / n.median_us, 2)
                out["native_vs_plain_p90"] = round(self.plain_fill.p90_us / n.p90_us, 2)
            if "compressed" in engine_names:
                c = self.compressed_expanded
                out["native_vs_compressed_median"] = round(c.median_us / n.median_us, 2)
                out["native_vs_compressed_p90"] = round(c.p90_us / n.p90_us, 2)
        return out

    @property
    def speedup_median(self) -> float:
        """Plain fill ÷ compressed (fill + expand): the speed-up as this project defines it (README)."""
        return self.plain_fill.median_us / self.compressed_expanded.median_us

    @property
    def speedup_p90(self) -> float:
        return self.plain_fill.p90_us / self.compressed_expanded.p90_us

    @property
    def speedup_total_median(self) -> float:
        """Like for like with the logits masked: plain (fill + apply) ÷ compressed (fill + expand + apply)."""
        return self.plain_total.median_us / self.compressed_total.median_us

    @property
    def speedup_total_p90(self) -> float:
        return self.plain_total.p90_us / self.compressed_total.p90_us

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("speedup_median", "speedup_p90", "speedup_total_median", "speedup_total_p90"):
            d[name] = getattr(self, name)
        return d


@dataclass
class EngineBench:
    """What :func:`bench_engines` measured for one grammar and one vocabulary."""

    tokenizer: str
    vocab_size: int
    num_classes: int
    source: str  # "docs", "samples" or "walks"
    paths: int
    path_tokens: int
    batches: list[BatchBench]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["batches"] = [b.to_dict() for b in self.batches]
        return d


@dataclass
class E2EBench:
    """End-to-end greedy decoding, tokens/s per engine (``"none"`` = unconstrained)."""

    model: str
    device: str
    max_new_tokens: int
    tokens_per_second: dict[str, float]
    tokens: dict[str, int]
    mask_ms_median: dict[str, float]
    same_text: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def machine_info() -> dict[str, Any]:
    """CPU model, cores, torch threads, GPU (if any), library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        xgrammar_version = version("xgrammar")
    except PackageNotFoundError:
        xgrammar_version = "?"
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "xgrammar": xgrammar_version,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    return info


def sample_docs(grammar_path: str | Path) -> list[str]:
    """The bundled sample documents of a grammar (by its file's stem, see :func:`.bundled.bundled_samples`), sorted."""
    return [p.read_text(encoding="utf-8") for p in bundled_samples(grammar_path)]


def _walk_paths(engines: CompiledEngines, walks: int, steps: int, seed: int) -> list[list[int]]:
    """Seeded random walks of the plain matcher, long tokens favoured; stop tokens excluded."""
    vocab = engines.vocab
    lengths = np.array([len(b) for b in vocab.token_bytes], dtype=np.float64)
    stops = set(int(s) for s in vocab.stop_ids)
    rng = np.random.default_rng(seed)
    paths = []
    for _ in range(walks):
        m = engines.plain()
        path: list[int] = []
        for _ in range(steps):
            allowed = np.flatnonzero(unpack_bitmask(m.next_vocab_bitmask(), vocab.vocab_size))
            if stops:
                allowed = allowed[~np.isin(allowed, list(stops))]
            if allowed.size == 0:
                break
            w = lengths[allowed] + 1.0
            token = int(allowed[rng.choice(allowed.size, p=w / w.sum())])
            if not m.accept_token(token):
                break
            path.append(token)
        if path:
            paths.append(path)
    return paths


def token_paths(
    engines: CompiledEngines,
    docs: Iterable[str] = (),
    *,
    steps: int = 200,
    seed: int = 0,
    walks: int = 4,
) -> list[list[int]]:
    """Token paths to replay: every document, tokenized, whole.

    A document is cut where the plain matcher refuses a token (one outside the grammar still
    gives its valid prefix). With no documents, ``walks`` seeded random walks of
    ``ceil(steps / walks)`` tokens (200 in all for ``steps <= 0``): walking needs a plain
    fill per token, so it is bounded.
    """
    vocab = engines.vocab
    paths: list[list[int]] = []
    for doc in docs:
        m = engines.plain()
        path = []
        for t in vocab.encode(doc):
            if not m.accept_token(int(t)):
                break
            path.append(int(t))
        if path:
            paths.append(path)
    if not paths:
        walk_tokens = steps if steps > 0 else 200
        paths = _walk_paths(engines, walks, -(-walk_tokens // walks), seed)
    return paths


def timed_positions(paths: Sequence[Sequence[int]], steps: int) -> list[set[int]]:
    """Which steps of each path to time: ``steps`` positions spread evenly over all paths.

    ``steps <= 0`` or more steps than tokens times every step. Deterministic, so the plain
    and compressed engines (and every batch size) are timed at the same states.
    """
    total = sum(len(p) for p in paths)
    if steps <= 0 or steps >= total:
        return [set(range(len(p))) for p in paths]
    chosen = np.unique(np.linspace(0, total - 1, steps).round().astype(np.int64))
    timed: list[set[int]] = []
    start = 0
    for p in paths:
        inside = chosen[(chosen >= start) & (chosen < start + len(p))] - start
        timed.append(set(int(i) for i in inside))
        start += len(p)
    return timed


ENGINE_NAMES = ("plain", "compressed", "native")


def _replay(
    matchers: dict[str, Any],
    paths: Sequence[Sequence[int]],
    timed: Sequence[set[int]],
    batch: int,
    vocab_size: int,
    clock=time.perf_counter,
    fill_untimed: Sequence[str] = (),
) -> dict[str, list[float]]:
    """Replay every path through each named matcher (or batch), timing the chosen steps.

    Keys of the result: ``E_fill``, ``E_apply``, ``E_accept`` per engine, and
    ``compressed_expand`` (only the compressed engine's native mask needs expanding).
    """
    times: dict[str, list[float]] = {f"{e}_{k}": [] for e in matchers for k in ("fill", "apply", "accept")}
    times["compressed_expand"] = []
    masks = {e: m.allocate_bitmask() if batch > 1 else m.allocate_bitmask(1) for e, m in matchers.items()}
    logits = torch.zeros(batch, vocab_size, dtype=torch.float32)
    tokens = None
    for path, when in zip(paths, timed):
        for m in matchers.values():
            m.reset()
        for i, token in enumerate(path):
            is_timed = i in when
            if is_timed:
                for e, m in matchers.items():
                    mask = masks[e]
                    t0 = clock()
                    m.fill_next_token_bitmask(mask)
                    t1 = clock()
                    if e == "compressed":
                        m.to_vocab_bitmask(mask)  # the packed vocabulary mask vLLM/SGLang would take
                        times["compressed_expand"].append(clock() - t1)
                    t2 = clock()
                    m.apply_bitmask_inplace(logits, mask)  # compressed: expansion applied to the logits
                    t3 = clock()
                    times[f"{e}_fill"].append(t1 - t0)
                    times[f"{e}_apply"].append(t3 - t2)
                logits.zero_()  # fresh finite logits each step (not timed)
            else:
                for e in fill_untimed:  # as a decode loop would: every step is filled
                    m = matchers.get(e)
                    if m is not None:
                        m.fill_next_token_bitmask(masks[e])
                        if e == "compressed":
                            m.to_vocab_bitmask(masks[e])
            ok = True
            if batch > 1:
                tokens = [token] * batch
            for e, m in matchers.items():
                t0 = clock()
                accepted = all(m.accept_tokens(tokens)) if batch > 1 else m.accept_token(token)
                if is_timed:
                    times[f"{e}_accept"].append(clock() - t0)
                ok = ok and accepted
            if not ok:  # cannot happen for paths from token_paths
                break
    return times


def bench_engines(
    grammar_text: str,
    vocab: VocabTable,
    classes: TokenClasses,
    *,
    docs: Iterable[str] = (),
    source: str = "docs",
    batch_sizes: Sequence[int] = (1,),
    steps: int = 200,
    seed: int = 0,
    expansion_repeats: int = 100,
    engines: CompiledEngines | None = None,
    engine_names: Sequence[str] = ("plain", "compressed"),
    native: Any = None,
    clock=time.perf_counter,
    fill_untimed: Sequence[str] = (),
) -> EngineBench:
    """Replay token paths through the engines for each batch size (see the module doc).

    Parameters
    ----------
    docs : iterable of str
        Documents to replay; empty → seeded random walks (``source`` becomes ``"walks"``).
    source : str
        A label for where ``docs`` came from (``"docs"``, ``"samples"``).
    steps : int
        Steps timed per batch size, spread evenly over the whole documents (0: every step);
        without documents, the length of the random walks in all. The paths and the timed
        positions are the same for every batch size.
    expansion_repeats : int
        Repeats of :func:`time_expansion` per batch size (0: skip).
    engine_names : sequence of str
        Engines to time, any of ``"plain"``, ``"compressed"``, ``"native"``.
    native : cfgzip_lab.native.NativeEngine, optional
        The native engine to time (built from ``grammar_text`` and ``classes`` if needed).
    fill_untimed : sequence of str
        Engines that also fill their mask (untimed) at the steps between timed ones, as a decode
        loop fills every step: the compressed and native engines keep memos across steps, which
        a sparse sample of steps would leave cold. Plain XGrammar's fill keeps no such state.
    clock : callable
        Seconds as a float; ``time.thread_time`` measures this thread's CPU time instead of
        wall time (on a machine shared with other busy processes, wall time counts the waits).

    Raises
    ------
    GrammarCompileError
        If XGrammar refuses the grammar.
    """
    start = time.perf_counter()
    engine_names = list(dict.fromkeys(engine_names))
    unknown = [e for e in engine_names if e not in ENGINE_NAMES]
    if unknown or not engine_names:
        raise ValueError(f"unknown engines {unknown} (choose from {', '.join(ENGINE_NAMES)})")
    engines = engines or compile_engines(grammar_text, vocab, classes)
    if "native" in engine_names and native is None:
        from .native import build_native_engine
        from .pipeline import compile_grammar

        native = build_native_engine(compile_grammar(grammar_text), vocab, classes, xgrammar_engines=engines)
    docs = list(docs)
    paths = token_paths(engines, docs, steps=steps, seed=seed)
    timed = timed_positions(paths, steps)
    if not docs:
        source = "walks"
    results = []
    for batch in batch_sizes:
        if batch < 1:
            raise ValueError(f"batch sizes must be positive, got {batch}")
        makers = {
            "plain": (engines.plain, engines.plain_batch),
            "compressed": (engines.compressed, engines.compressed_batch),
            "native": (native.matcher, native.batch) if native is not None else None,
        }
        matchers = {e: makers[e][0]() if batch == 1 else makers[e][1](batch) for e in engine_names}
        times = _replay(matchers, paths, timed, batch, vocab.vocab_size, clock, fill_untimed)
        for e in ENGINE_NAMES:
            for k in ("fill", "apply", "accept"):
                times.setdefault(f"{e}_{k}", [])
        native_total = [a + b for a, b in zip(times["native_fill"], times["native_apply"])]
        plain_total = [a + b for a, b in zip(times["plain_fill"], times["plain_apply"])]
        comp_expanded = [a + b for a, b in zip(times["compressed_fill"], times["compressed_expand"])]
        comp_total = [a + b for a, b in zip(times["compressed_fill"], times["compressed_apply"])]
        expansion = (
            time_expansion(engines.expander, batch_size=batch, repeats=expansion_repeats)
            if expansion_repeats and "compressed" in engine_names
            else {}
        )
        results.append(
            BatchBench(
                batch=batch,
                steps=max(len(times[f"{e}_fill"]) for e in engine_names),
                plain_fill=Quantiles.of(times["plain_fill"]),
                plain_total=Quantiles.of(plain_total),
                compressed_fill=Quantiles.of(times["compressed_fill"]),
                compressed_expanded=Quantiles.of(comp_expanded),
                compressed_total=Quantiles.of(comp_total),
                expansion=expansion,
                native_fill=Quantiles.of(times["native_fill"]),
                native_total=Quantiles.of(native_total),
                plain_accept=Quantiles.of(times["plain_accept"]),
                compressed_accept=Quantiles.of(times["compressed_accept"]),
                native_accept=Quantiles.of(times["native_accept"]),
                native_stats=native.stats() if native is not None and "native" in engine_names else {},
            )
        )
    return EngineBench(
        tokenizer=vocab.name,
        vocab_size=vocab.vocab_size,
        num_classes=classes.num_classes,
        source=source,
        paths=len(paths),
        path_tokens=sum(map(len, paths)),
        batches=results,
        seconds=time.perf_counter() - start,
    )


def bench_e2e(
    grammar_text: str,
    prompt: str,
    *,
    model_name: str = "smollm2",
    max_new_tokens: int = 32,
    threads: int | None = 1,
) -> E2EBench:
    """Greedy decoding with the model unconstrained, with plain XGrammar, and compressed.

    ``torch.set_num_threads(threads)`` during the runs (restored after), so that the
    measurement does not depend on how busy the other cores are. One warm-up generation
    per engine (compilation, classing, caches) is left out of the timing.
    """
    from .hf import constrained_generate, load_model

    model, tokenizer, vocab = load_model(model_name)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        rates, tokens, mask_ms, texts = {}, {}, {}, {}
        for engine in (None, "plain", "compressed"):
            kw = dict(vocab=vocab, engine=engine, max_new_tokens=max_new_tokens, do_sample=False)
            constrained_generate(model, tokenizer, grammar_text, prompt, **{**kw, "max_new_tokens": 2})
            result = constrained_generate(model, tokenizer, grammar_text, prompt, **kw)
            name = engine or "none"
            rates[name] = result.tokens_per_second
            tokens[name] = len(result.token_ids)
            mask_ms[name] = float(np.median(result.mask_seconds) * 1e3) if result.mask_seconds else 0.0
            texts[name] = result.text
    finally:
        torch.set_num_threads(old_threads)
    device = str(next(model.parameters()).device)
    return E2EBench(
        model=model_name,
        device=device,
        max_new_tokens=max_new_tokens,
        tokens_per_second=rates,
        tokens=tokens,
        mask_ms_median=mask_ms,
        same_text=texts["plain"] == texts["compressed"],
    )


def time_expansion(
    expander: Expander,
    *,
    batch_size: int = 1,
    repeats: int = 200,
    density: float = 0.5,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Median and p90 wall time (µs) of each expansion step on random class masks.

    For benchmarks and notebooks, never asserted on. Keys: ``to_vocab_bitmask``,
    ``to_logits_bias``, ``mask_logits_``, each ``{"median_us", "p90_us"}`` measured cold
    (the numpy backend's row memo cleared before every call: a class mask never seen
    before), and the same names with ``_memo`` measured warm (the mask seen before), plus
    the sizes and ``backend``, the expander's backend on ``device``. Host wall time around
    each call and a device synchronisation: on CUDA this includes the launch overhead
    (``benchmarks/gpu_e2e.py`` also times the kernels alone with CUDA events).
    """
    device = torch.device(device)
    rng = np.random.default_rng(seed)
    bits = rng.random((batch_size, expander.class_bitmask_size * 32)) < density
    class_mask = pack_bool_mask(bits).to(device)
    logits = torch.randn(batch_size, expander.vocab_size, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps = {
        "to_vocab_bitmask": lambda: expander.to_vocab_bitmask(class_mask),
        "to_logits_bias": lambda: expander.to_logits_bias(class_mask),
        "mask_logits_": lambda: expander.mask_logits_(logits, class_mask),
    }
    result: dict[str, Any] = {
        "vocab_size": expander.vocab_size,
        "num_classes": expander.num_classes,
        "batch_size": batch_size,
        "device": str(device),
        "backend": expander.backend_on(device),
        "torch_threads": torch.get_num_threads(),
    }
    for name, step in steps.items():
        for cold in (True, False):
            for _ in range(min(20, repeats)):
                step()
            sync()
            times = []
            for _ in range(repeats):
                if cold:
                    expander.clear_memo()
                start = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - start)
            times_us = np.asarray(times) * 1e6
            result[name if cold else f"{name}_memo"] = {
                "median_us": float(np.median(times_us)),
                "p90_us": float(np.percentile(times_us, 90)),
            }
    return result


# ---------------------------------------------------------------------------------------
# Does it pay? One-off cost against the per-step saving
# ---------------------------------------------------------------------------------------
NEVER = "never"


def one_off_seconds(*, classing_s: float = 0.0, compile_s: float = 0.0, cache_load_s: float | None = None) -> float:
    """What an engine costs before its first step, beyond what plain XGrammar costs anyway.

    Without a cache: classing (which includes our GNF compile when given) + the engine's own
    compile (XGrammar over the K classes; the native index). With a cache the classing is
    replaced by loading it: ``cache_load_s + compile_s``. Plain XGrammar's own compile is
    not counted: a plain decoder pays it too.
    """
    return (classing_s if cache_load_s is None else cache_load_s) + compile_s


def break_even(one_off_s: float, plain_step_s: float, engine_step_s: float) -> int | str:
    """Decode tokens after which an engine's one-off cost is paid back by its per-step saving.

    ``ceil(one_off_s / (plain_step_s - engine_step_s))``: 0 when there is nothing to pay back,
    and :data:`NEVER` (``"never"``) when the engine is not faster per step than plain
    XGrammar, so no number of tokens pays for it.

    >>> break_even(2.0, 300e-6, 100e-6)        # 2 s saved back at 200 µs a token
    10000
    >>> break_even(2.0, 50e-6, 80e-6)
    'never'
    """
    values = (one_off_s, plain_step_s, engine_step_s)
    if any(not np.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"break_even needs finite, non-negative seconds (got {values})")
    saving = plain_step_s - engine_step_s
    if saving <= 0:
        return NEVER
    if one_off_s == 0:
        return 0
    # rounded first: 2.0 / (300e-6 - 250e-6) is 40000.000000000004 in floats, 40,000 tokens in fact
    return int(np.ceil(round(one_off_s / saving, 6)))


def pays_text(tokens: int | str, plain_step_s: float, engine_step_s: float) -> str:
    """The break-even in words: ``pays after 1,234 tokens`` or ``never pays: 80 µs vs 50 µs per step``."""
    if tokens == NEVER:
        return (
            f"never pays: {engine_step_s * 1e6:,.1f} µs per step against plain {plain_step_s * 1e6:,.1f} µs "
            "(not faster per step)"
        )
    return f"pays after {tokens:,} tokens"
