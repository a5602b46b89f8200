"""XGrammar's own verdict on a grammar, computed in a child process.

xgrammar 0.2.8 crashes the whole process (SIGSEGV) on some grammars, for instance
``root ::= (y{2,3}){2}`` / ``y ::= root`` as soon as it is compiled. A live editor
compiles whatever the user has typed, so the workbench never compiles an unchecked
grammar inside the kernel: :class:`XGrammarChecker` sends it to a long-lived child
process (``python -m cfgzip_lab.widgets.xgrammar_worker``), which answers one JSON line
per request. A crash or a hang costs the child, never the kernel; the next request
starts a fresh one.

The child compiles with a raw vocabulary of the 256 single bytes plus one stop token
(as ``tests/test_grammar_samples.py`` does), so sample strings are fed byte by byte:
``accept_string`` returns False and keeps the state when a byte cannot continue.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

__all__ = ["XGrammarChecker", "XGrammarVerdict", "SampleMatch", "default_checker"]

_STOP_ID = 256
_POSITION = re.compile(r"line (\d+), column (\d+)")


@dataclass(frozen=True)
class SampleMatch:
    """How far XGrammar accepts one sample.

    ``accepted_bytes`` is the length of the longest accepted byte prefix; ``complete``
    says whether the whole sample is a sentence (all bytes, then the stop token).
    """

    accepted_bytes: int
    complete: bool


@dataclass(frozen=True)
class XGrammarVerdict:
    """XGrammar's compile result for one grammar text."""

    ok: bool
    message: str = ""
    seconds: float = 0.0
    crashed: bool = False
    line: int | None = None
    column: int | None = None
    samples: list[SampleMatch] = field(default_factory=list)

    def summary(self) -> str:
        if self.ok:
            return f"XGrammar compiled it in {self.seconds * 1000:.0f} ms"
        if self.crashed:
            return f"XGrammar crashed on this grammar ({self.message})"
        return f"XGrammar refused it: {self.message}"


def _verdict_from_error(message: str, seconds: float) -> XGrammarVerdict:
    # Drop the "[12:00:00] /project/cpp/grammar_parser.cc:820: " prefix XGrammar adds.
    message = message.strip().split("\n")[0]
    message = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", message)
    found = _POSITION.search(message)
    line, column = (int(found.group(1)), int(found.group(2))) if found else (None, None)
    return XGrammarVerdict(False, message, seconds, line=line, column=column)


class XGrammarChecker:
    """Asks a child process what XGrammar makes of a grammar; thread-safe, one request at a time.

    Parameters
    ----------
    timeout : float
        Seconds one request may take before the child is killed and the request fails.
    """

    def __init__(self, *, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    # -- the child --------------------------------------------------------------------

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cfgzip_lab.widgets.xgrammar_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # XGrammar's C++ warnings are not our protocol
                env=env,
            )
        return self._proc

    def warm_up(self) -> None:
        """Start the child (importing xgrammar takes seconds) without waiting for it."""
        threading.Thread(target=self._request, args=({"op": "ping"},), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _request(self, request: dict) -> dict:
        with self._lock:
            proc = self._start()
            timer = threading.Timer(self.timeout, proc.kill)
            timer.start()
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (BrokenPipeError, OSError):
                line = b""
            finally:
                timer.cancel()
            if line:
                return json.loads(line)
            code = proc.wait()
            self._proc = None
            if code == -signal.SIGKILL:
                return {"crashed": True, "message": f"no answer within {self.timeout:.0f} s"}
            name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
            return {"crashed": True, "message": name}

    # -- requests ---------------------------------------------------------------------

    def check(self, text: str, samples: list[bytes] | None = None, *, root: str = "root") -> XGrammarVerdict:
        """Compile ``text`` with XGrammar (from rule ``root``: its ``root_rule_name``); with
        ``samples``, also match each of them."""
        request = {"op": "check", "grammar": text}
        if root != "root":
            request["root"] = root
        if samples is not None:
            request["samples"] = [s.hex() for s in samples]
        answer = self._request(request)
        if answer.get("crashed"):
            return XGrammarVerdict(False, answer["message"], 0.0, crashed=True)
        if not answer["ok"]:
            return _verdict_from_error(answer["message"], answer["seconds"])
        matches = [SampleMatch(n, c) for n, c in answer.get("samples", [])]
        return XGrammarVerdict(True, "", answer["seconds"], samples=matches)


_default: XGrammarChecker | None = None


def default_checker() -> XGrammarChecker:
    """One checker per kernel, shared by every workbench."""
    global _default
    if _default is None:
        _default = XGrammarChecker()
    return _default


# -- the child's side -----------------------------------------------------------------


def _serve() -> None:
    import xgrammar as xgr

    vocab = [bytes([b]) for b in range(256)] + [b""]
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=[_STOP_ID]))
    last: tuple[tuple[str, str], object, float] | None = None  # ((text, root), compiled, seconds its compile took)
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        if request["op"] == "ping":
            answer: dict = {"ok": True}
        else:
            key = (request["grammar"], request.get("root", "root"))
            started = time.perf_counter()
            try:
                if last is None or last[0] != key:
                    compiled = compiler.compile_grammar(xgr.Grammar.from_ebnf(key[0], root_rule_name=key[1]))
                    last = (key, compiled, time.perf_counter() - started)
                # the compile's own time, also when a repeated check reuses it (not "1 µs")
                answer = {"ok": True, "seconds": last[2]}
            # Last resort, on purpose: XGrammar reports grammar errors as RuntimeError, and
            # whatever else it raises, this child must still answer the request.
            except Exception as error:
                answer = {"ok": False, "message": str(error), "seconds": time.perf_counter() - started}
            if answer["ok"] and "samples" in request:
                answer["samples"] = [_match(xgr, last[1], bytes.fromhex(s)) for s in request["samples"]]
        out.write((json.dumps(answer) + "\n").encode())
        out.flush()


def _match(xgr, compiled, data: bytes) -> tuple[int, bool]:
    matcher = xgr.GrammarMatcher(compiled)
    for i in range(len(data)):
        if not matcher.accept_string(data[i : i + 1]):
            return i, False
    return len(data), matcher.accept_token(_STOP_ID)


if __name__ == "__main__":
    _serve()
