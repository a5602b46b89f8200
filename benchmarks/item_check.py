"""One corpus item through every stage against plain XGrammar, in a child process with limits.

For an item (:class:`corpora.Item`) a forked child process

1. asks XGrammar first, as a user would: ``Grammar.from_json_schema`` / ``from_ebnf``, then a
   compilation over the whole vocabulary (of a schema's printed EBNF: the text the engines'
   oracle compiles, so this one compilation is XGrammar's verdict and the oracle both). An item
   it refuses or crashes on is "not accepted" and nothing else runs;
2. runs ours, stage by stage, timing each and reading the peak resident memory after it:
   ``front end`` (parse, JSON Schema → EBNF, lowering, dead ends) and ``gnf``
   (:func:`~cfgzip_lab.pipeline.compile_grammar`), ``classing``
   (:func:`~cfgzip_lab.pipeline.build_classes`), ``xgrammar compile`` (the compressed engine over
   the classes), ``index`` (the native engine, :func:`~cfgzip_lab.native.build_native_engine`,
   and its first matcher). A :class:`~cfgzip_lab.CfgzipError` at any of them is a refusal,
   grouped by its reason (:func:`refusal_reason`); any other exception is a failure (bad input
   must end in a CfgzipError, so that is a bug);
3. verifies each engine against plain XGrammar (:func:`cfgzip_lab.verify.verify_engines`): the
   instance replayed where there is one, then rounds of seeded walks up to a step target or a
   CPU budget; in a TagDispatch grammar the walks now and then type its tags and excluded strings
   (:func:`~cfgzip_lab.grammar.tag_dispatch.dispatch_triggers`), so that they dispatch. For a schema, XGrammar's grammar compiled straight from the schema object is checked
   against the oracle the same way ("xgrammar-schema"): the engines' oracle is XGrammar over
   the *printed* EBNF, and this says the print keeps its meaning.

The parent (:func:`run_items`) gives each child a wall-clock budget for XGrammar's verdict, one
for our stages before verification and another for each verification, and a memory budget (resident memory grown
since the child started, polled; ``RLIMIT_AS`` as a backstop, so an allocation past it is a
MemoryError). An item past a budget is killed and recorded "over budget" with its stage and,
from a ``faulthandler`` dump taken just before the kill, the innermost cfgzip_lab frame it
was in. The sweep itself thus never hangs or takes the machine's memory.

Children are forked from a parent that has loaded the vocabulary and XGrammar's tokenizer
info once (:func:`prepare`): 3 s of Llama-3 set-up per item saved. XGrammar compiles fine in
a forked child (its thread pool is made per compilation).
"""

from __future__ import annotations

import faulthandler
import os
import re
import resource
import signal
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corpora import Item

#: The stages of one item, in order; "verify E" follows for each engine E.
BUILD_STAGES = ("xgrammar", "front end", "gnf", "classing", "xgrammar compile", "index")
ENGINES = ("compressed", "native")
SCHEMA_CHECK = "xgrammar-schema"  # XGrammar from the schema vs XGrammar from its printed EBNF

#: Where a frame of cfgzip_lab is, by module path → the stage it belongs to (for "where" at a kill).
_STAGE_OF_MODULE = (
    ("grammar/gnf.py", "gnf"),
    ("grammar/words.py", "gnf"),
    ("grammar/", "front end"),
    ("classes/", "classing"),
    ("native/index.py", "index"),
    ("native/", "native"),
    ("verify.py", "verify"),
    ("engine.py", "xgrammar"),
)


@dataclass
class Limits:
    """Budgets of one item and how much verification it gets."""

    build_seconds: float = 90.0  # wall seconds for every stage of ours (front end to index)
    xgrammar_seconds: float = 180.0  # wall seconds for XGrammar's verdict (11 s CPU on jsb_0044 with Llama-3)
    verify_seconds: float = 20.0  # CPU seconds of walks per engine (after the instance)
    memory_gb: float = 2.0  # resident memory the child may grow by (the bound is 1.5 GB)
    walks: int = 2  # walks per round
    steps: int = 48  # steps per walk
    target_steps: int = 200  # per engine: rounds stop here (the instance counts)
    max_doc_tokens: int | None = 400
    seed: int = 0
    engines: tuple[str, ...] = ENGINES
    schema_check: bool = True

    def verify_wall_seconds(self) -> float:
        """Wall budget of one verification: its CPU budget, the instance, and a shared machine."""
        return 3 * self.verify_seconds + 60


@dataclass
class EngineCheck:
    """One engine (or the schema check) verified against plain XGrammar on one item."""

    engine: str
    steps: int = 0
    mismatches: int = 0
    xgrammar_disagreements: int = 0  # differences where XGrammar's matcher contradicts its own mask
    walks: int = 0
    docs: int = 0
    docs_rejected: int = 0  # the instance refused by the grammar (not a mismatch)
    rollbacks: int = 0
    rejections: int = 0
    stops: int = 0
    guides_typed: int = 0  # TagDispatch tags / excluded strings a walk typed to the end
    guide_tokens_taken: int = 0  # steps that took a token the grammar names by id (Token(...) & co.)
    valid_docs: int = 0  # MaskBench's valid instances replayed (to their end)...
    valid_rejected: int = 0  # ...of which XGrammar (and so both engines) refused part-way
    invalid_docs: int = 0  # MaskBench's invalid instances replayed...
    invalid_rejected: int = 0  # ...of which XGrammar (and both engines, at the same token) refused
    seconds: float = 0.0
    first_mismatch: dict[str, Any] | None = None
    note: str | None = None  # native: served through the compressed engine (no index / past the state budget)
    error: str | None = None


@dataclass
class ItemResult:
    """What happened to one item: XGrammar's verdict, ours, every stage's time and memory."""

    corpus: str
    name: str
    kind: str
    features: list[str] = field(default_factory=list)
    xgrammar: str = "not run"  # "accepts", "refuses", "crashed", "over budget"
    xgrammar_error: str | None = None
    #: "served", "refused" (a CfgzipError), "over budget", "failed" (another exception: a bug),
    #: "crashed" (the child died), "not accepted" (XGrammar refuses it: nothing of ours ran).
    verdict: str = "not run"
    stage: str | None = None  # where it was refused, over budget, failed or crashed
    reason: str | None = None  # the refusal's group (refusal_reason) or what budget ran out
    error: str | None = None  # the message
    where: str | None = None  # innermost cfgzip_lab frame at a kill or a failure
    seconds: dict[str, float] = field(default_factory=dict)  # wall, per stage
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # CPU (all threads), per stage
    peak_mb: dict[str, float] = field(default_factory=dict)  # process peak RSS after each stage
    start_mb: float = 0.0  # RSS when the child started (the forked parent: vocabulary, imports)
    stats: dict[str, int] = field(default_factory=dict)
    checks: list[EngineCheck] = field(default_factory=list)
    wall_seconds: float = 0.0
    load: float | None = None  # the machine's 1-minute load average when the item ended (the parent's)

    @property
    def id(self) -> str:
        return f"{self.corpus}/{self.name}"

    @property
    def steps(self) -> int:
        return sum(c.steps for c in self.checks if c.engine in ENGINES)

    @property
    def mismatches(self) -> int:
        return sum(c.mismatches for c in self.checks if c.engine in ENGINES)

    @property
    def build_seconds(self) -> float:
        return round(sum(v for k, v in self.seconds.items() if k in BUILD_STAGES[1:]), 3)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ItemResult:
        d = dict(d)
        d["checks"] = [EngineCheck(**c) for c in d.get("checks", [])]
        return cls(**d)


# ---------------------------------------------------------------------------------------
# What the parent prepares once (inherited by every forked child)
# ---------------------------------------------------------------------------------------
@dataclass
class Context:
    vocab: Any  # cfgzip_lab.vocab.VocabTable
    compiler: Any  # xgrammar.GrammarCompiler over the full vocabulary (the user's path)


_CONTEXT: Context | None = None


def prepare(tokenizer: Any) -> Context:
    """Load ``tokenizer``'s vocabulary (a registry name, or a VocabTable) and XGrammar's compiler
    over it, and import every stage."""
    global _CONTEXT
    import xgrammar as xgr

    import cfgzip_lab.native  # noqa: F401  (imported before forking: children start warm)
    import cfgzip_lab.verify  # noqa: F401
    from cfgzip_lab.engine import plain_tokenizer_info
    from cfgzip_lab.pipeline import build_classes, compile_grammar  # noqa: F401
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(tokenizer) if isinstance(tokenizer, str) else tokenizer
    _CONTEXT = Context(vocab, xgr.GrammarCompiler(plain_tokenizer_info(vocab), cache_enabled=False))
    return _CONTEXT


# ---------------------------------------------------------------------------------------
# Refusal reasons
# ---------------------------------------------------------------------------------------
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`|b'[^'\n]*'")
_NUMBER = re.compile(r"\d[\d,._]*")


def error_message(exc: BaseException) -> str:
    """The first error of a GrammarError (diagnostics carry line and column), else str(exc)."""
    diagnostics = [d for d in getattr(exc, "diagnostics", []) or [] if getattr(d, "severity", "error") == "error"]
    if diagnostics:
        d = diagnostics[0]
        return f"line {d.line}, column {d.column}: {d.message}"
    return str(exc).strip()


def refusal_reason(exc: BaseException) -> str:
    """A refusal's group: its type and its message with the particulars (names, quoted text,
    numbers, positions) taken out, so that "a lookahead at line 3" and "… at line 9" group."""
    return reason_of(type(exc).__name__, error_message(exc))


def reason_of(type_name: str, message: str) -> str:
    """:func:`refusal_reason` from an error's type name and message (as an item keeps them)."""
    message = message.splitlines()[0] if message else ""
    message = re.sub(r"^line \d+, column \d+: ", "", message)
    message = _QUOTED.sub("…", message)
    message = re.sub(r"\[[^\]\n]*\]", "[…]", message)  # attribute lists, character classes
    message = _NUMBER.sub("N", message)
    message = re.sub(r"\s+", " ", message).strip()
    return f"{type_name}: {message[:240]}"


# ---------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------
def _status_kb(field_name: str, pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds() -> float:
    """CPU seconds of this process, every thread (XGrammar compiles on several)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _innermost_cfgzip_frame(lines: Iterable[str]) -> str | None:
    """``cfgzip_lab/grammar/gnf.py:123 in step`` of the first (most recent) frame of ours."""
    for line in lines:
        m = re.search(r'File "([^"]*cfgzip_lab/[^"]+)", line (\d+)(?:,)? in (\S+)', line)
        if m:
            path = m.group(1)[m.group(1).rindex("cfgzip_lab/") :]
            return f"{path}:{m.group(2)} in {m.group(3)}"
    return None


def _stage_of_frame(where: str | None) -> str | None:
    if not where:
        return None
    for part, stage in _STAGE_OF_MODULE:
        if part in where:
            return stage
    return None


def _seed_of(item: Item, seed: int) -> int:
    return zlib.crc32(item.id.encode()) % 100_000 + seed * 100_000


def _trim_mismatch(m: dict[str, Any] | None) -> dict[str, Any] | None:
    if m is None:
        return None
    out = dict(m)
    if isinstance(out.get("prefix"), str) and len(out["prefix"]) > 400:
        out["prefix"] = "…" + out["prefix"][-400:]
    for key in ("plain_only", "compressed_only"):
        if isinstance(out.get(key), list):
            out[key] = out[key][:8]
    return out


class _Stages:
    """Tells the parent each stage as it starts, times it and reads the peak RSS after it."""

    def __init__(self, conn, result: ItemResult) -> None:
        self.conn, self.result = conn, result
        self.current: str | None = None
        self.t0 = self.c0 = 0.0

    def start(self, name: str) -> None:
        self.current = name
        self.conn.send(("stage", name))
        self.t0, self.c0 = time.perf_counter(), _cpu_seconds()

    def done(self) -> None:
        name, r = self.current, self.result
        r.seconds[name] = round(r.seconds.get(name, 0.0) + time.perf_counter() - self.t0, 3)
        r.cpu_seconds[name] = round(r.cpu_seconds.get(name, 0.0) + _cpu_seconds() - self.c0, 3)
        r.peak_mb[name] = round(_status_kb("VmHWM") / 1024, 1)
        self.snapshot()

    def snapshot(self) -> None:
        """The result so far, to the parent: an item killed later still says what it had done."""
        self.conn.send(("snapshot", self.result.to_dict()))


def _verify(
    ctx_engines,
    factory,
    name: str,
    item: Item,
    limits: Limits,
    walks_budget: float,
    stages: _Stages,
    guides: Sequence[bytes] = (),
    token_guides: Sequence[int] = (),
) -> EngineCheck:
    """The instance (MaskBench: every valid and invalid instance, to its end), then rounds of walks
    until the step target or the CPU budget, at least one (the check so far goes to the parent
    after each round, as part of the result). ``guides``: strings the walks
    type now and then (a TagDispatch grammar's tags, so that walks dispatch); ``token_guides``: the
    token ids the grammar names (Token(...) & co.), which walks take now and then."""
    from cfgzip_lab.verify import verify_engines

    check = EngineCheck(name)
    stages.result.checks.append(check)
    t0 = time.perf_counter()
    instance = item.instance_text()
    calls: list[dict[str, Any]] = [dict(walks=0, docs=[instance])] if instance is not None else []
    valid = [doc for ok, doc in item.tests if ok]
    invalid = [doc for ok, doc in item.tests if not ok]
    # MaskBench's instances to their end (no token limit): valid ones accepted, invalid ones refused
    calls += [dict(walks=0, docs=valid, max_doc_tokens=None, tests="valid")] if valid else []
    calls += [dict(walks=0, docs=invalid, max_doc_tokens=None, tests="invalid")] if invalid else []
    base = _seed_of(item, limits.seed)
    calls += [
        dict(walks=limits.walks, seed=base * 1000 + r, guides=guides, token_guides=token_guides) for r in range(1000)
    ]
    c1 = time.process_time()
    for call in calls:
        tests = call.pop("tests", None)
        report = verify_engines(
            ctx_engines, steps=limits.steps, candidate=factory, candidate_name=name,
            **{"max_doc_tokens": limits.max_doc_tokens, **call},
        )  # fmt: skip
        if tests == "valid":
            check.valid_docs, check.valid_rejected = report.docs, len(report.docs_rejected)
        elif tests == "invalid":
            check.invalid_docs, check.invalid_rejected = report.docs, len(report.docs_rejected)
        check.steps += report.steps_checked
        check.mismatches += report.mismatches
        check.xgrammar_disagreements += report.xgrammar_disagreements
        check.walks += report.walks
        check.docs += report.docs
        check.docs_rejected += len(report.docs_rejected)
        check.rollbacks += report.rollbacks
        check.rejections += report.rejections_checked
        check.stops += report.stops_reached
        check.guides_typed += report.guides_typed
        check.guide_tokens_taken += report.guide_tokens_taken
        check.first_mismatch = check.first_mismatch or _trim_mismatch(report.first_mismatch)
        check.seconds = round(time.perf_counter() - t0, 2)
        stages.snapshot()
        walked = call.get("walks", 0) > 0  # the instances, then at least one round of walks
        if walked and (check.steps >= limits.target_steps or time.process_time() - c1 >= walks_budget):
            break
    return check


def _child(item: Item, limits: Limits, conn, stack_path: str) -> None:
    """Runs in the forked child: every stage, the result sent back through ``conn``."""
    ctx = _CONTEXT
    assert ctx is not None, "prepare() first"
    with open(stack_path, "w") as stack_file, open(stack_path + ".err", "w") as err:
        os.dup2(err.fileno(), 2)  # XGrammar's C++ warnings, and a crash's last words: kept for the result
        faulthandler.enable(file=err, all_threads=True)  # a segfault's Python stack goes there too
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.memory_gb > 0:  # the backstop; the parent polls the resident size
            limit = _status_kb("VmSize") * 1024 + int((limits.memory_gb + 1.0) * 2**30)
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(
                resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
            )
        result = ItemResult(item.corpus, item.name, item.kind, list(item.features))
        result.start_mb = round(_status_kb("VmRSS") / 1024, 1)
        stages = _Stages(conn, result)
        try:
            _run_stages(item, limits, ctx, stages, result)
        except MemoryError:
            result.verdict, result.stage, result.reason = "over budget", stages.current, "memory"
            result.error = f"MemoryError: past {limits.memory_gb:g} GB more than at the start"
            result.where = _innermost_cfgzip_frame(reversed(traceback.format_exc().splitlines()))
        result.wall_seconds = round(sum(result.seconds.values()), 2)
        conn.send(("result", result.to_dict()))


def _run_stages(item: Item, limits: Limits, ctx: Context, stages: _Stages, result: ItemResult) -> None:
    import torch
    import xgrammar as xgr

    from cfgzip_lab.engine import PlainMatcher, compile_engines
    from cfgzip_lab.errors import CfgzipError
    from cfgzip_lab.grammar.tag_dispatch import dispatch_triggers
    from cfgzip_lab.grammar.token_macros import guide_token_ids
    from cfgzip_lab.native import build_native_engine
    from cfgzip_lab.pipeline import build_classes, compile_grammar

    torch.set_num_threads(1)
    text = item.text()
    stages.start("xgrammar")
    try:
        grammar = xgr.Grammar.from_json_schema(text) if item.kind == "json_schema" else xgr.Grammar.from_ebnf(text)
        # The engines' oracle compiles this very text (the schema's printed EBNF, the EBNF itself):
        # compiled here once, in the engines' cache, it is XGrammar's verdict and the oracle both.
        printed = str(grammar) if item.kind == "json_schema" else text
        compile_engines(printed, ctx.vocab).plain()
    except Exception as exc:  # XGrammar's refusals are RuntimeErrors (and a few others)
        stages.done()
        result.xgrammar, result.verdict = "refuses", "not accepted"
        result.xgrammar_error = (
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        )
        return
    stages.done()
    result.xgrammar = "accepts"

    def fail(exc: BaseException) -> None:
        stages.done()
        result.stage = stages.current
        result.error = error_message(exc)[:2000]
        if isinstance(exc, CfgzipError):
            result.verdict, result.reason = "refused", refusal_reason(exc)
        else:
            result.verdict, result.reason = "failed", f"{type(exc).__name__} (not a CfgzipError)"
            tb = traceback.format_exc().splitlines()
            result.where = _innermost_cfgzip_frame(reversed(tb))
            result.error = "\n".join([result.error] + tb[-6:])[:3000]

    stages.start("front end")
    try:
        compiled = compile_grammar(text, source=str(item.path), kind=item.kind)
    except MemoryError:
        raise
    except Exception as exc:
        return fail(exc)
    gnf_seconds = compiled.seconds.get("gnf", 0.0)
    stages.done()
    # compile_grammar runs both: the front end is its time less the normal form's
    wall = result.seconds["front end"]
    result.seconds["front end"] = round(wall - gnf_seconds, 3)
    result.seconds["gnf"] = round(gnf_seconds, 3)
    # one thread: the normal form's share of the CPU is its share of the wall time (on a busy
    # machine the wall time is several times the CPU time, so not the wall time itself)
    cpu = result.cpu_seconds["front end"]
    result.cpu_seconds["gnf"] = round(cpu * min(1.0, gnf_seconds / wall) if wall > 0 else 0.0, 3)
    result.cpu_seconds["front end"] = round(cpu - result.cpu_seconds["gnf"], 3)
    result.peak_mb["gnf"] = result.peak_mb["front end"]
    result.stats.update({k: int(v) for k, v in compiled.stats().items()})
    guides = dispatch_triggers(compiled.ast)  # walks must reach TagDispatch's tags (issue 19)
    if guides:
        result.stats["guides"] = len(guides)
    token_guides = guide_token_ids(compiled.gnf, ctx.vocab)  # walks must take Token(...)'s ids too
    if token_guides:
        result.stats["token_guides"] = len(token_guides)
    stages.snapshot()

    stages.start("classing")
    try:
        classing = build_classes(compiled, ctx.vocab)
    except MemoryError:
        raise
    except Exception as exc:
        return fail(exc)
    classes = classing.classes
    result.stats["classes"] = int(classes.num_classes)
    stages.done()

    stages.start("xgrammar compile")
    try:
        engines = compile_engines(compiled.text, ctx.vocab, classes)
        engines.plain()
        engines.compressed()
    except MemoryError:
        raise
    except Exception as exc:
        return fail(exc)
    stages.done()

    factories: dict[str, Callable[[], Any]] = {}
    if "compressed" in limits.engines:
        factories["compressed"] = engines.compressed
    native = None
    if "native" in limits.engines:
        stages.start("index")
        try:
            native = build_native_engine(compiled, ctx.vocab, classes, classing=classing, xgrammar_engines=engines)
            native.matcher()  # the engine's own set-up is the index stage's, not verification's
        except MemoryError:
            raise
        except Exception as exc:
            return fail(exc)
        stages.done()
        factories["native"] = native.matcher
    result.verdict = "served"

    for name, factory in factories.items():
        stages.start(f"verify {name}")
        try:
            check = _verify(engines, factory, name, item, limits, limits.verify_seconds, stages, guides, token_guides)
        except MemoryError:
            raise
        except Exception as exc:
            check = result.checks[-1] if result.checks and result.checks[-1].engine == name else EngineCheck(name)
            check.error = f"{type(exc).__name__}: {exc}"[:2000]
            check.note = _innermost_cfgzip_frame(reversed(traceback.format_exc().splitlines()))
            if check not in result.checks:
                result.checks.append(check)
        stages.done()
        if name == "native" and native is not None:
            unavailable, fallbacks = getattr(native, "unavailable", None), getattr(native, "fallbacks", 0)
            if unavailable:
                check.note = f"no native index, all {fallbacks} requests on the compressed engine: {unavailable}"
            elif fallbacks:
                check.note = f"{fallbacks} requests past the state budget, on the compressed engine"

    if item.kind == "json_schema" and limits.schema_check:
        stages.start(f"verify {SCHEMA_CHECK}")
        try:
            from_schema = ctx.compiler.compile_grammar(grammar)  # the user's path: no printing in between
            _verify(
                engines, lambda: PlainMatcher(from_schema, ctx.vocab), SCHEMA_CHECK, item, limits,
                limits.verify_seconds / 4, stages,
            )  # fmt: skip
        except Exception as exc:
            if not result.checks or result.checks[-1].engine != SCHEMA_CHECK:
                result.checks.append(EngineCheck(SCHEMA_CHECK))
            result.checks[-1].error = f"{type(exc).__name__}: {exc}"[:2000]
        stages.done()


# ---------------------------------------------------------------------------------------
# The parent
# ---------------------------------------------------------------------------------------
@dataclass
class _Running:
    item: Item
    process: Any
    conn: Any
    stack_path: str
    started: float
    stage: str | None = None
    stage_started: float = 0.0
    peak_rss_kb: int = 0
    start_rss_kb: int = 0
    snapshot: dict[str, Any] | None = None  # the child's result so far
    build_started: float | None = None  # when our front end started


def _deadline(run: _Running, limits: Limits) -> float:
    """XGrammar's verdict gets the build budget of its own; ours runs from the front end on."""
    if run.stage and run.stage.startswith("verify"):
        return run.stage_started + limits.verify_wall_seconds()
    if run.build_started is None:
        return run.started + limits.xgrammar_seconds
    return run.build_started + limits.build_seconds


def in_xgrammars_matcher(stage: str | None, what: str, where: str | None) -> bool:
    """Was an item killed while XGrammar's own matcher verified it (its stages all done)?

    ``cfgzip_lab/engine.py`` is where the plain and compressed matchers call XGrammar: xgrammar
    0.2.8's ``accept_token`` doubles in time with every digit on ``root ::= ([0-9]*){0, 872}``-like
    grammars with lookaheads (28 s for the 8th token of xgrammar-tests' test_grammar_parser__L989).
    """
    return bool(
        (stage or "").startswith("verify ") and what == "time" and where and where.startswith("cfgzip_lab/engine.py")
    )


def _over_budget(run: _Running, limits: Limits, what: str) -> ItemResult:
    """Dump the child's stacks (faulthandler on SIGUSR1), kill it, and say where it was."""
    try:
        os.kill(run.process.pid, signal.SIGUSR1)
        for _ in range(60):  # a loaded machine may take a while to schedule the handler
            time.sleep(0.05)
            if os.path.getsize(run.stack_path) > 0:
                time.sleep(0.1)
                break
    except OSError:
        pass
    run.process.kill()
    run.process.join()
    dump = Path(run.stack_path).read_text(errors="replace") if os.path.exists(run.stack_path) else ""
    # faulthandler lists the current thread first (most recent call first): the main thread
    where = _innermost_cfgzip_frame(dump.splitlines())
    result = _partial(run)
    result.verdict, result.stage, result.reason, result.where = "over budget", run.stage, what, where
    if run.stage == "xgrammar":
        result.xgrammar = "over budget"
        result.verdict = "not accepted"
        result.xgrammar_error = f"XGrammar past the {what} budget"
    else:
        result.xgrammar = "accepts"
    detail = _stage_of_frame(where)
    if detail and run.stage in ("front end",) and detail == "gnf":
        result.stage = "gnf"  # compile_grammar runs both; the stack says which
    if what == "memory":
        budget = f"past {limits.memory_gb:g} GB more memory"
    elif run.stage and run.stage.startswith("verify"):
        budget = f"past {limits.verify_wall_seconds():g} s wall"
    elif run.stage == "xgrammar":
        budget = f"past {limits.xgrammar_seconds:g} s wall"
    else:
        budget = f"past {limits.build_seconds:g} s wall"
    result.error = f"{budget} in stage {result.stage}" + (f", at {where}" if where else "")
    if in_xgrammars_matcher(run.stage, what, where):
        # Every stage of ours is done and the item is served: it is XGrammar's own matcher (the
        # oracle's accept_token or fill) that is too slow to go on checking. Not ours to bound.
        engine = run.stage[len("verify ") :]
        check = next((c for c in result.checks if c.engine == engine), None)
        if check is None:
            check = EngineCheck(engine)
            result.checks.append(check)
        check.error = f"verification cut short: XGrammar's matcher {result.error}"
        result.verdict, result.reason, result.error = "served", None, None
    result.peak_mb["killed"] = round(run.peak_rss_kb / 1024, 1)
    result.start_mb = round(run.start_rss_kb / 1024, 1)
    result.wall_seconds = round(time.perf_counter() - run.started, 2)
    return result


def _tail(path: str, chars: int = 600) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


def _partial(run: _Running) -> ItemResult:
    """The child's last snapshot (the stages it finished, verification so far), or a bare result."""
    if run.snapshot is not None:
        return ItemResult.from_dict(run.snapshot)
    item = run.item
    return ItemResult(item.corpus, item.name, item.kind, list(item.features))


def _finished(run: _Running, payload: dict[str, Any] | None) -> ItemResult:
    run.process.join()
    if payload is not None:
        return ItemResult.from_dict(payload)
    result = _partial(run)
    code = run.process.exitcode
    result.stage = run.stage
    if run.stage == "xgrammar":
        result.xgrammar, result.verdict = "crashed", "not accepted"
        result.xgrammar_error = f"XGrammar crashed (exit status {code})"
    else:
        result.xgrammar, result.verdict = "accepts", "crashed"
        result.reason = f"the process died (exit status {code})"
        result.error = f"{result.reason} in stage {run.stage}"
    last_words = _tail(run.stack_path + ".err")
    if last_words:
        if result.xgrammar == "crashed":
            result.xgrammar_error += f": {last_words}"
        else:
            result.error += f"; stderr: {last_words}"
    result.peak_mb["died"] = round(run.peak_rss_kb / 1024, 1)
    result.wall_seconds = round(time.perf_counter() - run.started, 2)
    return result


def run_items(
    items: list[Item],
    limits: Limits,
    *,
    workers: int = 1,
    on_result: Callable[[ItemResult], None] | None = None,
    poll: float = 0.05,
    stop: Callable[[], bool] | None = None,
) -> list[ItemResult]:
    """Each item in its own forked child (at most ``workers`` at once), within ``limits``.

    :func:`prepare` must have run. Results come back in completion order (``on_result`` is
    called with each as it finishes); nothing an item does can stop the others. Once ``stop()``
    is true no further item starts (those running finish): the items run are then a prefix of
    ``items``.
    """
    import multiprocessing as mp

    if _CONTEXT is None:
        raise RuntimeError("item_check.prepare(tokenizer) first")
    context = mp.get_context("fork")
    pending = list(items)
    running: list[_Running] = []
    results: list[ItemResult] = []
    tmp = tempfile.mkdtemp(prefix="cfgzip-sweep-")
    memory_kb = int(limits.memory_gb * 2**20)

    def finish(result: ItemResult) -> None:
        result.load = round(os.getloadavg()[0], 2)
        results.append(result)
        if on_result is not None:
            on_result(result)

    while pending or running:
        if pending and stop is not None and stop():
            pending = []
        while pending and len(running) < max(1, workers):
            item = pending.pop(0)
            parent_end, child_end = context.Pipe(duplex=False)
            stack_path = os.path.join(tmp, f"{len(results) + len(running)}-{os.getpid()}.stack")
            process = context.Process(target=_child, args=(item, limits, child_end, stack_path), daemon=True)
            process.start()
            child_end.close()
            now = time.perf_counter()
            run = _Running(item, process, parent_end, stack_path, now, None, now)
            run.start_rss_kb = _status_kb("VmRSS", process.pid)
            running.append(run)
        time.sleep(poll)
        for run in list(running):
            payload, done = None, False
            try:
                while run.conn.poll():
                    kind, value = run.conn.recv()
                    if kind == "stage":
                        run.stage, run.stage_started = value, time.perf_counter()
                        if value == "front end":
                            run.build_started = run.stage_started
                    elif kind == "snapshot":
                        run.snapshot = value
                    else:
                        payload, done = value, True
            except (EOFError, OSError):
                done = True
            if not done and not run.process.is_alive():
                done = True
            if done:
                running.remove(run)
                run.conn.close()
                finish(_finished(run, payload))
                continue
            rss = _status_kb("VmRSS", run.process.pid)
            run.peak_rss_kb = max(run.peak_rss_kb, rss)
            over = None
            if memory_kb > 0 and rss - run.start_rss_kb > memory_kb:
                over = "memory"
            elif time.perf_counter() > _deadline(run, limits):
                over = "time"
            if over:
                running.remove(run)
                result = _over_budget(run, limits, over)
                run.conn.close()
                finish(result)
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    return results
