"""The cache directory and the per-request API over it: keys, LRU bounds, damage, two processes.

Every grammar here is checked against real XGrammar where a mask is involved (the native
engine a cached grammar gives, through :func:`cfgzip_lab.verify.verify_engines`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

import cfgzip_lab as cz
from cfgzip_lab.cache.directory import (
    CacheKey,
    CacheWarning,
    ClassCacheDir,
    code_version,
    default_cache_dir,
    grammar_key,
)
from cfgzip_lab.cache.grammars import GrammarCache, resolve_input
from cfgzip_lab.vocab import vocab_from_bytes

REPO = Path(__file__).resolve().parents[1]
GRAMMAR = 'root ::= "[" item ("," item)* "]"\nitem ::= [a-c]+ | "x"\n'
SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "yz"]}}, "required": ["a"]}'
GBNF = 'root ::= "(" [0-9]+ ")" | "-"\n'
TOKENS = [b"[", b"]", b",", b"a", b"b", b"ab", b"abc", b"x", b"[a", b"c]", b'{"', b'"a"', b":", b"1", b"12", b"}"]
TOKENS += [b'"', b" ", b"(", b")", b"-", b"yz", b'"x"', b"\n", b""]


@pytest.fixture(autouse=True)
def write_every_build(monkeypatch):
    """These tests are about the folder, so every build is written, however fast (the toy
    vocabulary's build in a millisecond too); the write policy has its own test below."""
    monkeypatch.setattr("cfgzip_lab.cache.grammars.WRITE_AFTER_S", 0.0)


@pytest.fixture(scope="module")
def toy():
    return vocab_from_bytes(TOKENS, stop_ids=[len(TOKENS) - 1], name="toy")


def _verify(ready, vocab, walks=10):
    from cfgzip_lab.engine import compile_engines
    from cfgzip_lab.verify import verify_engines

    report = verify_engines(
        compile_engines(ready.compiled.text, vocab, ready.classes),
        walks=walks,
        steps=30,
        candidate=ready.matcher,
        candidate_name="native",
    )
    assert report.ok and report.steps_checked > 20, report.first_mismatch


# -- keys and the folder ------------------------------------------------------------------------
def test_key_names_input_vocabulary_and_code(toy):
    key = grammar_key(GRAMMAR, "ebnf", toy)
    assert key == CacheKey("ebnf", cz.grammar_sha256(GRAMMAR), toy.fingerprint, code_version())
    assert code_version().startswith(cz.__version__ + "+")
    others = {
        grammar_key(GRAMMAR + " ", "ebnf", toy),
        grammar_key(GRAMMAR, "gbnf", toy),
        grammar_key(
            GRAMMAR, "ebnf", vocab_from_bytes(TOKENS[:-2] + [b"q", b""], stop_ids=[len(TOKENS) - 1], name="toy")
        ),
        CacheKey("ebnf", key.input_sha256, key.vocab_fingerprint, "0.0.0+other"),
    }
    assert key not in others and len({k.filename for k in others | {key}}) == 5
    assert key.filename.startswith("ebnf-") and key.filename.endswith(".npz")


def test_the_folder_moves_with_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CFGZIP_CACHE_DIR", str(tmp_path / "here"))
    assert default_cache_dir() == tmp_path / "here" and ClassCacheDir().root == tmp_path / "here"
    monkeypatch.delenv("CFGZIP_CACHE_DIR")
    monkeypatch.setenv("CFGZIP_CACHE", str(tmp_path / "base"))
    assert default_cache_dir() == tmp_path / "base" / "classes"
    monkeypatch.setenv("CFGZIP_CACHE_MAX_BYTES", "12345")
    assert ClassCacheDir().max_bytes == 12345


def test_input_kinds_resolve():
    assert resolve_input(GRAMMAR) == (GRAMMAR, "ebnf")
    assert resolve_input(SCHEMA) == (SCHEMA, "json_schema")
    assert resolve_input({"type": "integer"}) == ('{"type": "integer"}', "json_schema")
    assert resolve_input(GBNF, "gbnf") == (GBNF, "gbnf")
    assert resolve_input(cz.compile_grammar(GBNF, kind="gbnf"))[1] == "ebnf"
    with pytest.raises(ValueError, match="unknown grammar kind"):
        resolve_input(GRAMMAR, "yaml")
    with pytest.raises(ValueError, match="cannot be read as 'gbnf'"):
        resolve_input({"type": "integer"}, "gbnf")
    with pytest.raises(TypeError, match="not int"):
        resolve_input(42)


# -- the API: memory, disk, built ----------------------------------------------------------------
COUNTED = 'root ::= "[" [a-c]{2,30} "]"\n'  # a counted repetition: index edges IN(f, lo, hi) stored apart


@pytest.mark.parametrize(
    "grammar, kind",
    [(GRAMMAR, "auto"), (SCHEMA, "auto"), (GBNF, "gbnf"), (COUNTED, "ebnf")],
    ids=["ebnf", "json_schema", "gbnf", "counted"],
)
def test_built_then_memory_then_disk_all_exact(toy, tmp_path, grammar, kind):
    folder = ClassCacheDir(tmp_path)
    cache = GrammarCache(4, cache_dir=folder)
    built = cache.get(grammar, toy, kind=kind)
    assert built.origin == built.source == "built" and len(folder.entries()) == 1
    assert cache.get(grammar, toy, kind=kind) is built and built.source == "memory"
    _verify(built, toy)
    fresh = GrammarCache(4, cache_dir=folder)  # another process, as far as memory goes
    loaded = fresh.get(grammar, toy, kind=kind)
    assert loaded.origin == "disk" and loaded.engine.index_source == "cache"
    assert loaded.compiled._front_end is None  # neither front end nor classing ran
    assert (loaded.classes.class_of == built.classes.class_of).all()
    assert loaded.compiled.text == built.compiled.text and loaded.compiled.grammar_source.text == grammar
    _verify(loaded, toy)
    assert fresh.stats == {"memory": 0, "disk": 1, "built": 0} and folder.stats["hits"] == 1
    assert folder.stats["writes"] == 1  # the build's; the load used the stored index, no rewrite


def test_top_level_helpers_and_no_cache(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("CFGZIP_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.setattr("cfgzip_lab.cache.grammars._default", None)
    matcher = cz.matcher_for(GRAMMAR, toy)
    assert matcher.accept_token(0) and not matcher.accept_token(1)  # "[" then not "]"
    assert cz.engine_for(GRAMMAR, toy) is cz.engine_for(GRAMMAR, toy)  # one shared engine
    assert len(ClassCacheDir(tmp_path / "default").entries()) == 1
    alone = cz.engine_for('root ::= "b"+\n', toy, cache=False)
    assert alone.matcher().accept_token(4) and len(ClassCacheDir(tmp_path / "default").entries()) == 1
    memory_only = GrammarCache(2, cache_dir=False)
    memory_only.matcher('root ::= "a"\n', toy)
    assert memory_only.disk is None and len(memory_only) == 1


@pytest.mark.parametrize("compact_from", [0, 1 << 20], ids=["compacted", "classing-store"])
def test_a_build_keeps_a_compact_store_or_classings_own(toy, tmp_path, monkeypatch, compact_from):
    """A build past COMPACT_FROM_BYTES keeps a store of its GNF's nodes alone; a smaller one the store
    classing left and its displacer. Either serves masks equal to XGrammar's."""
    monkeypatch.setattr("cfgzip_lab.cache.grammars.COMPACT_FROM_BYTES", compact_from)
    from cfgzip_lab.grammar.compiled_words import CompiledWordStore, available

    if not available():
        pytest.skip("the compiled word store is not built")
    ready = GrammarCache(2, cache_dir=False).get(SCHEMA, toy)
    store = ready.compiled.gnf.store
    assert isinstance(store, CompiledWordStore) and ready.compiled._front_end is None
    if compact_from:
        assert ready.displacer is not None and ready.engine.walker.displacer is ready.displacer
        assert ready.displacer.store is store and store.stats()["step_memo"] > 0  # classing's steps kept
    else:
        assert ready.displacer is None and store.stats()["step_memo"] == 0  # a fresh store of the GNF
    _verify(ready, toy)


def test_builds_quicker_than_write_after_stay_in_memory(toy, tmp_path, monkeypatch):
    """A build that took less than ``write_after`` is not written (reading the smallest entries back
    costs more than building them); it is held in memory as any other; 0 writes every build."""
    folder = ClassCacheDir(tmp_path)
    quick = GrammarCache(2, cache_dir=folder, write_after=3600.0)
    ready = quick.get(GRAMMAR, toy)
    assert ready.origin == "built" and "write" not in ready.seconds
    assert folder.entries() == [] and folder.stats["writes"] == 0
    assert quick.get(GRAMMAR, toy) is ready and ready.source == "memory"
    _verify(ready, toy)
    monkeypatch.setattr("cfgzip_lab.cache.grammars.WRITE_AFTER_S", 3600.0)  # the default, read when a cache is made
    assert GrammarCache(1, cache_dir=folder).get(SCHEMA, toy).origin == "built" and folder.entries() == []
    written = GrammarCache(1, cache_dir=folder, write_after=0).get(GRAMMAR, toy)
    assert written.origin == "built" and written.seconds["write"] > 0 and len(folder.entries()) == 1
    assert GrammarCache(1, cache_dir=folder, write_after=3600.0).get(GRAMMAR, toy).origin == "disk"  # read all the same


def test_least_recently_used_grammars_leave_memory(toy):
    cache = GrammarCache(2, cache_dir=False)
    a, b, c = ('root ::= "a"\n', 'root ::= "b"\n', 'root ::= "c"\n')
    first = cache.get(a, toy)
    cache.get(b, toy)
    cache.get(a, toy)  # a is now the most recent
    cache.get(c, toy)  # b goes
    assert len(cache) == 2 and cache.get(a, toy) is first
    assert cache.get(b, toy).source == "built" and cache.stats["built"] == 4


def test_one_build_for_concurrent_requests(toy):
    cache = GrammarCache(4, cache_dir=False)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(GRAMMAR, toy))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in got}) == 1 and cache.stats["built"] == 1 and cache.stats["memory"] == 3


def test_grammar_errors_are_cfgzip_errors_and_not_cached(toy, tmp_path):
    cache = GrammarCache(2, cache_dir=tmp_path)
    with pytest.raises(cz.GrammarError) as info:
        cache.get('root ::= "a" |\n', toy)
    assert info.value.diagnostics[0].line == 1
    with pytest.raises(cz.CfgzipError):
        cache.get('{"type": "object", "properties": 3}', toy)
    assert len(cache) == 0 and not list(tmp_path.iterdir())


# -- size bound, damage --------------------------------------------------------------------------
def test_the_folder_keeps_the_least_recently_used_within_its_bound(toy, tmp_path):
    folder = ClassCacheDir(tmp_path, max_bytes=10**9)
    cache = GrammarCache(8, cache_dir=folder)
    grammars = [f'root ::= "{c}"+\n' for c in "abcx"]
    for i, g in enumerate(grammars):
        cache.get(g, toy)
        os.utime(folder.path_for(cache.key(g, toy)), (1000 + i, 1000 + i))  # a over b over c over x
    assert len(folder.entries()) == 4
    folder.load(cache.key(grammars[0], toy), toy)  # a read makes a the most recently used
    sizes = {p.name: p.stat().st_size for p in folder.entries()}
    folder.max_bytes = sum(sizes.values()) - 1
    assert folder.evict() == 1
    names = {p.name for p in folder.entries()}
    assert folder.path_for(cache.key(grammars[1], toy)).name not in names  # b, the oldest, went
    assert folder.path_for(cache.key(grammars[0], toy)).name in names
    folder.max_bytes = 0  # a new write is kept even so; everything older goes
    cache.clear()
    cache.get('root ::= "ab"\n', toy)
    assert [p.name for p in folder.entries()] == [cache.key('root ::= "ab"\n', toy).filename]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another entry"])
def test_a_damaged_entry_is_reported_once_removed_and_rebuilt(toy, tmp_path, damage):
    folder = ClassCacheDir(tmp_path)
    GrammarCache(2, cache_dir=folder).get(GRAMMAR, toy)
    path = folder.path_for(grammar_key(GRAMMAR, "ebnf", toy))
    if damage == "garbage":
        path.write_bytes(b"not a cache at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-200])
    else:  # a whole, valid cache of another grammar under this name
        GrammarCache(2, cache_dir=folder).get('root ::= "x"\n', toy)
        folder.path_for(grammar_key('root ::= "x"\n', "ebnf", toy)).replace(path)
    with pytest.warns(CacheWarning, match=str(path)):
        ready = GrammarCache(2, cache_dir=folder).get(GRAMMAR, toy)
    assert ready.origin == "built" and folder.stats["corrupt"] == 1
    _verify(ready, toy)
    assert GrammarCache(2, cache_dir=folder).get(GRAMMAR, toy).origin == "disk"  # rewritten whole
    path.write_bytes(b"damaged again")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # the same file is not reported twice
        assert GrammarCache(2, cache_dir=folder).get(GRAMMAR, toy).origin == "built"


def test_an_unwritable_folder_is_reported_not_raised(toy, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    with pytest.warns(CacheWarning, match="not written"):
        ready = GrammarCache(2, cache_dir=blocker / "classes").get(GRAMMAR, toy)
    assert ready.origin == "built" and ready.matcher().accept_token(0)


# -- two processes at once -----------------------------------------------------------------------
_WORKER = textwrap.dedent(
    """
    import sys, warnings
    from cfgzip_lab.cache.directory import CacheWarning, ClassCacheDir, grammar_key
    from cfgzip_lab.cache.grammars import GrammarCache
    from cfgzip_lab.vocab import vocab_from_bytes
    warnings.simplefilter("error", CacheWarning)  # a half-written file read would fail this process
    folder_path, role, rounds, grammar, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    vocab = vocab_from_bytes([bytes.fromhex(t) for t in tokens.split(",")], stop_ids=[len(tokens.split(",")) - 1], name="toy")
    folder = ClassCacheDir(folder_path)
    ready = GrammarCache(1, cache_dir=False).get(grammar, vocab)
    key = grammar_key(grammar, "ebnf", vocab)
    seen = {"read": 0, "none": 0}
    if role == "reader":  # start reading once a writer has written (they go on rewriting meanwhile)
        import time
        deadline = time.time() + 120
        while not folder.path_for(key).exists() and time.time() < deadline:
            time.sleep(0.005)
    for _ in range(rounds):
        if role == "writer":
            assert folder.store(key, ready.compiled, ready.classes, vocab, ready.index) is not None
        got = folder.load(key, vocab, input_text=grammar)
        if got is None:
            seen["none"] += 1
        else:
            assert (got.classes.class_of == ready.classes.class_of).all() and got.grammar.text == grammar
            seen["read"] += 1
    print(seen)
    """
)


def test_two_processes_writing_and_reading_one_entry(toy, tmp_path):
    """Two writers rewrite one entry while a reader reads it: every read is a whole file."""
    tokens = ",".join(t.hex() for t in TOKENS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(tmp_path), role, "60", GRAMMAR, tokens],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for role in ("writer", "writer", "reader")
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    reader = json.loads(outs[2][0].strip().replace("'", '"'))
    assert reader["read"] > 0, reader  # it did read while the others wrote
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary left behind
    folder = ClassCacheDir(tmp_path)
    contents = folder.load(grammar_key(GRAMMAR, "ebnf", toy), toy)
    assert contents is not None and len(folder.entries()) == 1


def test_two_processes_building_one_grammar(toy, tmp_path):
    """Two processes asked for one new grammar at once: both get it right, one whole file stays."""
    code = textwrap.dedent(
        """
        import sys
        from cfgzip_lab.cache.grammars import GrammarCache
        from cfgzip_lab.vocab import vocab_from_bytes
        tokens = [bytes.fromhex(t) for t in sys.argv[2].split(",")]
        vocab = vocab_from_bytes(tokens, stop_ids=[len(tokens) - 1], name="toy")
        ready = GrammarCache(1, cache_dir=sys.argv[1], write_after=0).get(sys.argv[3], vocab)
        m = ready.matcher()
        print(ready.origin, m.accept_token(0), m.accept_token(3), m.accept_token(1))
        """
    )
    tokens = ",".join(t.hex() for t in TOKENS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), tokens, GRAMMAR],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert time.perf_counter() - start < 300
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Warning" not in err, err
        origin, *accepted = out.split()
        assert origin in ("built", "disk") and accepted == ["True", "True", "True"]
    folder = ClassCacheDir(tmp_path)
    assert len(folder.entries()) == 1 and folder.load(grammar_key(GRAMMAR, "ebnf", toy), toy) is not None


# -- the CLI and the workbench share the folder -----------------------------------------------------
SMALL = 'root ::= "[" [0-9]+ ("," [0-9]+)* "]"\n'


def _cli(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "cfgzip_lab.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cli_classes_once_then_reads_the_folder(tmp_path):
    grammar = tmp_path / "small.ebnf"
    grammar.write_text(SMALL)
    first = _cli("compress", str(grammar), "--tokenizer", "smollm2")
    again = _cli("compress", str(grammar), "--tokenizer", "smollm2", "-o", str(tmp_path / "copy.npz"))
    assert first["source"] == "built" and again["source"] == "cache" and again["classes"] == first["classes"]
    assert Path(first["output"]).parent == Path(os.environ["CFGZIP_CACHE_DIR"])
    assert (
        _cli("compress", str(grammar), "--tokenizer", "smollm2", "--no-cache", "-o", str(tmp_path / "b.npz"))["source"]
        == "built"
    )
    record = _cli("verify", str(grammar), "--tokenizer", "smollm2", "--engine", "native", "--walks", "4")
    assert record["mismatches"] == 0 and record["native_index_source"] == "cache"
    api = GrammarCache(1).get(SMALL, cz.load_vocab("smollm2"))  # the API finds what the CLI classed
    assert api.origin == "disk" and api.classes.num_classes == first["classes"]


def test_the_workbench_reads_and_writes_the_folder(checker):
    from cfgzip_lab.widgets.session import WorkbenchSession

    first = WorkbenchSession(SMALL, tokenizer="smollm2", checker=checker)
    first.compile(xgrammar=False)
    assert first.run_classing(wait=True).status == "done" and first.classes_source == "classing"
    second = WorkbenchSession(SMALL, tokenizer="smollm2", checker=checker)
    second.compile(xgrammar=False)
    assert second.run_classing(wait=True).status == "done", second.errors
    assert second.classes_source == "the class cache directory" and second.classing is None
    assert "cache_load" in second.timings and "classing" not in second.timings
    assert (second.classes.class_of == first.classes.class_of).all() and second.classes_current
    # The workbench stores no index; the API adds it the first time and writes the entry whole.
    vocab = cz.load_vocab("smollm2")
    ready = GrammarCache(1).get(SMALL, vocab)
    assert ready.origin == "disk" and ready.index is not None
    _verify(ready, vocab)
    assert "native_edges" in GrammarCache(1).disk.load(ready.key, vocab).arrays
    second.use_class_cache = False
    assert second.run_classing(wait=True).status == "done" and second.classes_source == "classing"
    for s in (first, second):
        s.close()


def test_the_collector_pause_nests_and_comes_back():
    import gc

    from cfgzip_lab._gc import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer build still runs
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a failed build")
    assert gc.isenabled()
