"""The C functions longer than a limit: every function of ``csrc/`` (or the files given) over ``--limit``
lines, longest first; exit status 1 if there is one.

    .venv/bin/python scripts/c_function_lengths.py [--limit 150] [--all] [FILE ...]

A function is counted from the line of its opening brace's declaration to its closing brace, comments
and blank lines included (what a reader scrolls through). It is found by brace depth over the text with
comments, strings and preprocessor lines blanked: a top-level ``{`` whose declaration ends in ``)`` opens
a function (a struct, an enum or an initializer does not). Enough for our C, which has no K&R
definitions and no braces inside macros at the top level. ``tests/test_c_function_lengths.py`` runs it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
LIMIT = 150


class Function(NamedTuple):
    path: str
    name: str
    first: int  # 1-based line of the declaration
    last: int  # 1-based line of the closing brace

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


_CODE_NOISE = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def code_only(text: str) -> str:
    """``text`` with comments, string and char literals and preprocessor lines blanked (lines kept)."""
    text = _CODE_NOISE.sub(_blank, text)
    lines, out, continued = text.split("\n"), [], False
    for line in lines:
        directive = continued or line.lstrip().startswith("#")
        out.append(" " * len(line) if directive else line)
        continued = directive and line.rstrip().endswith("\\")
    return "\n".join(out)


def functions(path: Path) -> list[Function]:
    """Every function defined in the C file at ``path``, in file order."""
    code = code_only(path.read_text(encoding="utf-8"))
    found, depth, head_start, opened = [], 0, 0, None
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                head = code[head_start:i]
                names = re.findall(r"([A-Za-z_]\w*)\s*\(", head)
                if head.rstrip().endswith(")") and names:
                    first_char = head_start + len(head) - len(head.lstrip())
                    opened = (names[0], code.count("\n", 0, first_char) + 1)
                else:
                    opened = None
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                if opened is not None:
                    found.append(Function(str(path), opened[0], opened[1], code.count("\n", 0, i) + 1))
                opened, head_start = None, i + 1
        elif ch == ";" and depth == 0:
            head_start = i + 1
    return found


def over(paths: list[Path], limit: int = LIMIT) -> list[Function]:
    """The functions of ``paths`` over ``limit`` lines, longest first."""
    every = [f for path in paths for f in functions(path)]
    return sorted((f for f in every if f.lines > limit), key=lambda f: (-f.lines, f.path, f.first))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="C files (default: csrc/*.c and csrc/*.h)")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"longest allowed, in lines (default {LIMIT})")
    parser.add_argument("--all", action="store_true", help="list every function, longest first")
    args = parser.parse_args(argv)
    paths = args.files or sorted((REPO / "csrc").glob("*.[ch]"))
    listed = over(paths, -1 if args.all else args.limit)
    for f in listed:
        path = Path(f.path)
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        print(f"{f.lines:5d}  {shown}:{f.first}  {f.name}")
    long_ones = [f for f in listed if f.lines > args.limit]
    print(f"{len(long_ones)} function(s) over {args.limit} lines in {len(paths)} file(s)", file=sys.stderr)
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
