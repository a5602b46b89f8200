"""Bounded resources: classing a grammar built to blow up stays under a memory cap, and past
a (lowered) cap it stops with a message naming the token and the rules to simplify.

The grammar combines the known traps (see DESIGN.md, "Exact without blow-up"): a deep
precedence chain ``e_i ::= e_{i+1} (ws op ws e_{i+1})* ("?" ws e_{i+1})?`` over nullable
whitespace with comments, many mutually recursive nullable rules, and a rule with a long run
of one byte; Llama-3's vocabulary brings tokens of up to 128 spaces and other long runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from cfgzip_lab.classes.classing import compute_classes
from cfgzip_lab.classes.limits import BYTES_PER_DAG_NODE, DEFAULT_MAX_DAG_NODES, ClassingLimitError
from cfgzip_lab.errors import CfgzipError
from cfgzip_lab.pipeline import compile_grammar
from cfgzip_lab.vocab import vocab_from_bytes

#: The memory cap the slow test holds classing to (peak resident size of the whole process:
#: interpreter, numpy, the vocabulary, GNF and classing). Measured with Llama-3: 469 MB and
#: 9.4 s of CPU for 10 levels and 16 nullable rules (the test's size); 927 MB for 14 and 24.
MEMORY_CAP_MB = 768

OPS = ["+", "-", "*", "/", "%", "<<", ">>", "<", ">", "==", "!=", "&", "^", "|", "&&", "||", "??", "**"]


def blowup_grammar(levels: int, nullables: int, run: int = 64) -> str:
    """A precedence chain ``levels`` deep, ``nullables`` nullable rules in a cycle, a ``run``-byte literal."""
    lines = ["root ::= ws e0 ws"]
    for i in range(levels):
        nxt = f"e{i + 1}" if i + 1 < levels else "atom"
        lines.append(f'e{i} ::= {nxt} (ws "{OPS[i % len(OPS)]}" ws {nxt})* ("?" ws {nxt})?')
    chain = " ".join(f"n{j}" for j in range(nullables))
    lines.append(f'atom ::= [0-9]+ | [a-z_]+ | "(" ws e0 ws ")" | "\\"" [^"\\\\]* "\\"" | {chain} "@" | pad')
    for j in range(nullables):
        lines.append(f'n{j} ::= "" | "k{j}" ws | n{(j + 1) % nullables} "!"')
    lines.append("ws ::= ([ \\t\\n] | comment)*")
    lines.append('comment ::= "/*" ([^*] | "*"+ [^*/])* "*"+ "/" | "//" [^\\n]* "\\n"')
    lines.append('pad ::= "' + " " * run + '"')
    return "\n".join(lines) + "\n"


RUNS_VOCAB = (
    [b" " * n for n in range(1, 49)]
    + [b"(" * n for n in range(1, 17)]
    + [
        b"/*",
        b"*/",
        b"//",
        b"a",
        b"1",
        b"+",
        b" +",
        b"(a",
        b"k1",
        b"!",
        b"\n",
        b"\t",
        b"  //",
        b"**/",
    ]
)


def test_the_blowup_grammar_is_what_xgrammar_reads():
    import xgrammar

    xgrammar.Grammar.from_ebnf(blowup_grammar(4, 4))  # no exception: a valid grammar, not a typo


def test_past_the_cap_classing_stops_naming_the_token_and_the_rules():
    vocab = vocab_from_bytes(RUNS_VOCAB, name="runs")
    full = compute_classes(
        compile_grammar(blowup_grammar(4, 4)).gnf, vocab.token_bytes, vocab.kinds
    )  # fits the default cap
    cap = full.classes.metadata["dag_nodes"] // 2
    compiled = compile_grammar(
        blowup_grammar(4, 4)
    )  # a fresh DAG: the first run's nodes are memoised in the GNF's store
    with pytest.raises(ClassingLimitError) as info:
        compute_classes(compiled.gnf, vocab.token_bytes, vocab.kinds, max_dag_nodes=cap)
    message = str(info.value)
    assert isinstance(info.value, CfgzipError)  # the CLI and the workbench show it as bad input
    assert f"{cap:,} nodes" in message and "while walking the token b'" in message
    rules = message.split("rule ", 1)[1].split(" ", 1)[0].strip("'")
    assert rules in compiled.ast.rules, message  # a rule of the grammar, by its source name
    assert "raise max_dag_nodes" in message


def test_the_cap_is_the_memory_cap():
    assert DEFAULT_MAX_DAG_NODES * BYTES_PER_DAG_NODE <= 1.5 * 2**30


CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, {tests!r})
    from test_limits import blowup_grammar
    from cfgzip_lab.pipeline import build_classes, compile_grammar
    from cfgzip_lab.vocab_sources import load_vocab
    def peak_mb():
        # VmHWM is this program's own high-water mark. ru_maxrss is not: Linux carries it over
        # exec from the forked parent, so a child of a big pytest worker reports the worker's size.
        try:
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
        except (OSError, StopIteration):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    vocab = load_vocab("llama3")
    t = time.perf_counter()
    compiled = compile_grammar(blowup_grammar({levels}, {nullables}))
    result = build_classes(compiled, vocab)
    print(json.dumps({{
        "peak_mb": peak_mb(),
        "seconds": time.perf_counter() - t,
        "classes": result.classes.num_classes,
        "dag_nodes": result.classes.metadata["dag_nodes"],
        "fallback_singletons": result.classes.metadata["fallback_singletons"],
        "gnf_productions": compiled.gnf.num_productions,
    }}))
    """
)


@pytest.mark.slow
def test_blowup_grammar_classes_llama3_under_the_memory_cap():
    """In a child process, so the peak resident size is classing's own (ru_maxrss)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    code = CHILD.format(tests=tests, levels=10, nullables=16)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    print(record)
    assert record["gnf_productions"] > 10**13  # a blow-up grammar: listed, its GNF would not fit anywhere
    assert record["peak_mb"] < MEMORY_CAP_MB, record
    assert record["dag_nodes"] < DEFAULT_MAX_DAG_NODES
    assert record["classes"] > 100
