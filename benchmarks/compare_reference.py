"""Class counts and times: cfgzip_lab vs the reference CFGzip (PyPI ``cfgzip`` 0.2.0), side by side.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compare_reference.py [GRAMMAR ...] [--timeout 300]

Both sides run as subprocesses, so process start and vocabulary loading count on both:

- ours: ``cfgzip-lab compress GRAMMAR --tokenizer llama3 -o /tmp/x.npz --json``;
- the reference: its Rust executable ``cfgzip-preprocess --model-id ID --cache-dir DIR``.
  It reads ``tokenizer.json`` (plus ``config.json`` / ``tokenizer_config.json`` for the
  stop token) only through the ``hf-hub`` crate's cache, i.e. from
  ``DIR/models--ORG--NAME/refs/main`` (a commit hash) and
  ``DIR/models--ORG--NAME/snapshots/<hash>/tokenizer.json``; with the files there it
  never goes to the network. We build that folder from our Llama-3 VocabTable
  (byte-level BPE strings, GPT-2's byte map; special ids as added tokens, which the run
  excludes with ``--ignore-range``, like our engines never allow them).

Each reference run has a wall-clock timeout and an address-space limit (it can run out
of memory on grammars with long runs of identical bytes; that is a finding, reported as
``timeout`` / ``out of memory``). Peak RSS comes from ``/usr/bin/time`` when present.
The reference's "fallbacks" are the tokens it forces into singletons: 0 in exact mode
(the default here) — it has no budget, it either finishes or blows up.

Not a test: prints a table and the machine; never asserts on times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import THIRD_PARTY

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
DEFAULT_GRAMMARS = ["json", "c_like", "bython", "xml", "sql_select", str(THIRD_PARTY / "xgrammar_builtin_json.ebnf")]
MODEL_ID = "cfgzip-lab/llama3-local"
FAKE_COMMIT = "0" * 40

sys.path.insert(0, str(ROOT))


def ensure_reference() -> Path:
    """The ``cfgzip-preprocess`` executable, installing ``cfgzip==0.2.0`` (--no-deps) if missing."""
    exe = VENV_BIN / "cfgzip-preprocess"
    if not exe.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "cfgzip==0.2.0", "interegular"], check=True
        )
    if not exe.exists():
        found = shutil.which("cfgzip-preprocess")
        if not found:
            raise SystemExit("cfgzip-preprocess not found after installing cfgzip==0.2.0")
        exe = Path(found)
    return exe


def build_hub_cache(vocab, cache_dir: Path) -> None:
    """A hub-style cache folder holding a byte-level BPE ``tokenizer.json`` for ``vocab``.

    ``model.vocab`` maps GPT-2 byte-level strings to ids for every NORMAL token; stop and
    special ids become added tokens named ``<|cfgzip_special_N|>``. No merges are needed:
    the reference only reads the vocabulary.
    """
    from cfgzip_lab.vocab import NORMAL, byte_level_decoder

    to_char = {b: c for c, b in byte_level_decoder().items()}
    model_vocab, added = {}, []
    for i, (data, kind) in enumerate(zip(vocab.token_bytes, vocab.kinds)):
        if int(kind) == NORMAL and data:
            model_vocab["".join(to_char[b] for b in bytes(data))] = i
        else:
            added.append(
                {
                    "id": i,
                    "content": f"<|cfgzip_special_{i}|>",
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": model_vocab,
            "merges": [],
        },
    }
    repo = cache_dir / ("models--" + MODEL_ID.replace("/", "--"))
    snap = repo / "snapshots" / FAKE_COMMIT
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(FAKE_COMMIT)
    (snap / "tokenizer.json").write_text(json.dumps(tokenizer))
    stop = int(vocab.stop_ids[0]) if vocab.stop_ids else 0
    eos = f"<|cfgzip_special_{stop}|>"
    (snap / "config.json").write_text(json.dumps({"eos_token_id": stop, "vocab_size": vocab.vocab_size}))
    (snap / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    (snap / "special_tokens_map.json").write_text(json.dumps({"eos_token": eos}))


def _timed(cmd: list[str], timeout: float, mem_limit_gb: float | None) -> dict:
    """Run ``cmd``; wall seconds, exit status, output, peak RSS (MB) when /usr/bin/time exists."""
    time_bin = Path("/usr/bin/time")
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        full = [str(time_bin), "-f", "%M", "-o", rss_file.name, *cmd] if time_bin.exists() else cmd

        def limit() -> None:
            if mem_limit_gb:
                import resource

                n = int(mem_limit_gb * 2**30)
                resource.setrlimit(resource.RLIMIT_AS, (n, n))

        t0 = time.perf_counter()
        try:
            proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout, preexec_fn=limit)
            status, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            status, out, err = "timeout", exc.stdout or "", exc.stderr or ""
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        seconds = time.perf_counter() - t0
        try:
            rss = int(rss_file.read().strip().splitlines()[-1]) / 1024
        except (ValueError, IndexError):
            rss = None
    return {"status": status, "stdout": out, "stderr": err, "seconds": seconds, "peak_rss_mb": rss}


def run_ours(grammar: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(VENV_BIN / "cfgzip-lab"),
            "compress",
            grammar,
            "--tokenizer",
            "llama3",
            "-o",
            f"{tmp}/x.npz",
            "--json",
        ]
        r = _timed(cmd, timeout, None)
    if r["status"] == 0:
        rec = json.loads(r["stdout"].strip().splitlines()[-1])
        r.update(classes=rec["classes"], fallbacks=rec["fallback_singletons"], dead=rec["dead_tokens"])
    return r


def _reference_classes(output: Path) -> tuple[int | None, int | None]:
    """(classes, invalid tokens) from the reference's output folder.

    It writes ``tc.pt`` (int32[V]: class id, -1 for invalid tokens), ``inv.pt`` (the
    invalid ids) and ``cr.pkl`` (representatives); the class count is the number of
    distinct ids >= 0 in ``tc.pt`` (read with torch's weights-only loader, no pickle).
    """
    try:
        import torch

        tc = torch.load(output / "tc.pt", map_location="cpu", weights_only=True)
        inv = torch.load(output / "inv.pt", map_location="cpu", weights_only=True)
    except Exception:
        return None, None
    return int(tc[tc >= 0].unique().numel()), int(inv.numel())


_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\0(?![0-9])")


def reference_dialect(text: str) -> tuple[str, int]:
    """The same grammar in words the reference parses: ``\\0`` → ``\\x00``.

    Its terminals go through Rust's ``regex`` crate, which reads ``\\0`` as a
    backreference and refuses it; ``\\x00`` is the same byte.
    """
    text, n = _NUL_ESCAPE.subn(lambda m: m.group(1) + "\\x00", text)
    text, k = _strip_lookaheads(text)
    return text, n + k


def _strip_lookaheads(text: str) -> tuple[str, int]:
    """Drop XGrammar lookahead assertions ``(= ...)`` (the reference cannot parse them).

    A lookahead only narrows where a rule may end, so the reference then classes a
    superset language; the table marks such rows. One scan: strings and character
    classes (with their escapes) are skipped, and ``depth`` counts the parentheses of
    the lookahead being dropped.
    """
    out, i, count, depth = [], 0, 0, 0
    quote = bracket = False
    while i < len(text):
        ch = text[i]
        step = 2 if ch == "\\" and (quote or bracket) else 1
        dropping = depth > 0
        if step == 1:
            if quote:
                quote = ch != '"'
            elif bracket:
                bracket = ch != "]"
            elif ch == '"':
                quote = True
            elif ch == "[":
                bracket = True
            elif ch == "(" and (dropping or text.startswith("(=", i)):
                count += not dropping
                depth += 1
                dropping = True
            elif ch == ")" and dropping:
                depth -= 1
        if not dropping:
            out.append(text[i : i + step])
        i += step
    return "".join(out), count


def run_reference(exe: Path, grammar_path: Path, cache_dir: Path, timeout: float, mem_limit_gb: float, vocab) -> dict:
    specials = [i for i, k in enumerate(vocab.kinds) if int(k) != 0]
    ignore = f"{min(specials)}..{max(specials) + 1}" if specials else None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "classes.pt"
        text, rewrites = reference_dialect(grammar_path.read_text(encoding="utf-8"))
        if rewrites:
            grammar_path = Path(tmp) / grammar_path.name
            grammar_path.write_text(text, encoding="utf-8")
        cmd = [
            str(exe),
            "--model-id",
            MODEL_ID,
            "--cache-dir",
            str(cache_dir),
            "--grammar-file",
            str(grammar_path),
            "--output",
            str(out),
            "--n-logits",
            str(vocab.vocab_size),
            "--no-progress",
            "--timings",
        ]
        if ignore:
            cmd += ["--ignore-range", ignore]
        r = _timed(cmd, timeout, mem_limit_gb)
        r["classes"], r["invalid"] = _reference_classes(out) if out.is_dir() else (None, None)
    if r["status"] not in (0, "timeout") and re.search(r"memory|alloc", r["stderr"], re.I):
        r["status"] = "out of memory"
    r["fallbacks"] = 0  # exact mode: no skip flags
    r["rewrites"] = rewrites
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*", default=DEFAULT_GRAMMARS)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per reference run")
    ap.add_argument("--mem-limit-gb", type=float, default=12.0, help="address-space limit of a reference run")
    ap.add_argument("--verbose", action="store_true", help="print the reference's output")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from cfgzip_lab.bench import machine_info
    from cfgzip_lab.pipeline import resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    exe = ensure_reference()
    vocab = load_vocab("llama3")
    cache_dir = Path(tempfile.mkdtemp(prefix="cfgzip-ref-hub-"))
    build_hub_cache(vocab, cache_dir)
    header = f"{'grammar':<28} {'ours':>7} {'ref':>7} {'ours s':>7} {'ref s':>8} {'ours MB':>8} {'ref MB':>8} {'fb ours':>7} {'fb ref':>6} {'dead':>6} {'ref inv':>7}  ref status"
    rows = [header]
    print(header, flush=True)
    for name in args.grammars:
        path = resolve_grammar(name)
        ours = run_ours(name, args.timeout)
        ref = run_reference(exe, path, cache_dir, args.timeout, args.mem_limit_gb, vocab)
        if args.verbose:
            print(ref["stdout"][-2000:], ref["stderr"][-2000:], sep="\n")

        def fmt(v, spec):
            return format(v, spec) if isinstance(v, (int, float)) else "-"

        status = ref["status"] if ref["status"] != 0 else "ok"
        if status not in ("ok", "timeout", "out of memory"):
            status = f"exit {status}: {ref['stderr'].strip().splitlines()[-1][:60] if ref['stderr'].strip() else ''}"
        if ref.get("rewrites"):
            status += f" (rewritten for its parser: {ref['rewrites']} edits, see reference_dialect)"
        if ours["status"] != 0:
            status += f"; ours exit {ours['status']}"
        row = (
            f"{path.stem:<28} {fmt(ours.get('classes'), '>7')} {fmt(ref.get('classes'), '>7')} "
            f"{fmt(ours['seconds'], '>7.2f')} {fmt(ref['seconds'], '>8.2f')} {fmt(ours['peak_rss_mb'], '>8.0f')} "
            f"{fmt(ref['peak_rss_mb'], '>8.0f')} {fmt(ours.get('fallbacks'), '>7')} {fmt(ref.get('fallbacks'), '>6')} {fmt(ours.get('dead'), '>6')} {fmt(ref.get('invalid'), '>7')}  {status}"
        )
        rows.append(row)
        print(row, flush=True)
    m = machine_info()
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; reference: cfgzip 0.2.0 cfgzip-preprocess (1 thread, exact mode), "
        f"timeout {args.timeout:.0f} s, limit {args.mem_limit_gb:.0f} GB; Llama-3 vocabulary ({vocab.vocab_size} ids)"
    )
    shutil.rmtree(cache_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
