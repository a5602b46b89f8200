"""Does XGrammar decide tokens differently over the representatives alone? With and without shadow prefixes.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/shadow_prefix_sweep.py [--tokenizer smollm2]
        [--walks 8] [--steps 32] [GRAMMAR ...]

For each grammar (default: the bundled ones and the third-party ones except SMILES, whose plain
fills take 0.3-0.5 s each), seeded random walks of the plain matcher; at every step the plain
vocabulary mask is compared, bit for bit, with the expanded class mask of two compressed
vocabularies: the K representatives alone, and the representatives followed by
:func:`cfgzip_lab.engine.shadow_prefixes` (what the engine uses). Prints one row per grammar
with the number of steps where each disagrees. Evidence for the workaround in
:mod:`cfgzip_lab.engine`; rerun it when XGrammar is upgraded.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import all_grammars, grammar_name  # noqa: E402


def default_grammars() -> list[Path]:
    return [p for p in all_grammars() if "SMILES" not in p.parts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*", help="grammar files or bundled names (default: see above)")
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--walks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import numpy as np
    import xgrammar as xgr

    from cfgzip_lab.engine import compile_engines, compressed_tokenizer_info, shadow_prefixes
    from cfgzip_lab.expand import unpack_bitmask
    from cfgzip_lab.pipeline import build_classes, compile_grammar, resolve_grammar
    from cfgzip_lab.vocab_sources import load_vocab

    vocab = load_vocab(args.tokenizer)
    paths = [resolve_grammar(g) for g in args.grammars] or default_grammars()
    print(f"{args.tokenizer}: {vocab.vocab_size} tokens; {args.walks} walks x {args.steps} steps, seed {args.seed}")
    print(
        f"{'grammar':<32} {'K':>6} {'shadows':>7} {'steps':>6} | mismatching steps: {'reps alone':>10} {'with shadows':>12}"
    )
    totals = [0, 0, 0]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        classes = build_classes(compile_grammar(text, source=str(path)), vocab).classes
        engines = compile_engines(text, vocab, classes)
        with_shadows = compressed_tokenizer_info(vocab, classes)
        k = classes.num_classes
        reps_alone = xgr.TokenizerInfo(
            list(with_shadows.decoded_vocab)[:k],
            xgr.VocabType.RAW,
            vocab_size=k,
            stop_token_ids=list(with_shadows.stop_token_ids),
        )
        compiled = {
            name: xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(text)
            for name, info in (("reps alone", reps_alone), ("with shadows", with_shadows))
        }
        class_of = np.asarray(classes.class_of)
        lengths = np.array([len(b) for b in vocab.token_bytes], dtype=np.float64) + 1.0
        rng = np.random.default_rng(args.seed)
        mismatches = {name: 0 for name in compiled}
        steps = 0
        for _ in range(args.walks):
            plain = engines.plain()
            matchers = {name: xgr.GrammarMatcher(cg) for name, cg in compiled.items()}
            for _ in range(args.steps):
                if plain.is_terminated():
                    break
                allowed = unpack_bitmask(plain.next_vocab_bitmask(), vocab.vocab_size)
                for name, m in matchers.items():
                    size = compiled[name].tokenizer_info.vocab_size
                    mask = xgr.allocate_token_bitmask(1, size)
                    m.fill_next_token_bitmask(mask)
                    class_bits = unpack_bitmask(mask[0], size)[:k]
                    mismatches[name] += int(not np.array_equal(class_bits[class_of], allowed))
                steps += 1
                choices = np.flatnonzero(allowed)
                if choices.size == 0:
                    break
                w = lengths[choices]
                token = int(choices[rng.choice(choices.size, p=w / w.sum())])
                plain.accept_token(token)
                for m in matchers.values():
                    m.accept_token(int(class_of[token]))
        totals[0] += steps
        totals[1] += mismatches["reps alone"]
        totals[2] += mismatches["with shadows"]
        name = grammar_name(path)
        print(
            f"{name:<32} {k:>6} {len(shadow_prefixes(vocab, classes)):>7} {steps:>6} | "
            f"{'':>19}{mismatches['reps alone']:>10} {mismatches['with shadows']:>12}",
            flush=True,
        )
    print(f"{'all':<32} {'':>6} {'':>7} {totals[0]:>6} | {'':>19}{totals[1]:>10} {totals[2]:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
