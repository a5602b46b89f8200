"""What a corpus sweep found, per corpus: counts, refusals grouped by reason, the README's table.

Reads :class:`item_check.ItemResult` dicts (as ``docs/sweep.json`` keeps them under
``corpora.items``) and writes the coverage table that README's exactness section shows
between ``<!-- corpus-coverage:start -->`` and ``<!-- corpus-coverage:end -->``:
``benchmarks/sweep.py --corpus-table docs/sweep.json --readme README.md`` regenerates it.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from corpora import ALL_NAMES
from item_check import ENGINES, SCHEMA_CHECK

START, END = "<!-- corpus-coverage:start -->", "<!-- corpus-coverage:end -->"
#: The issue's bounds on compile_grammar + classing + native index (issue 17).
BOUND_SECONDS, BOUND_MB = 30.0, 1536.0
OURS = ("front end", "gnf", "classing", "index")


def _checks(item: dict[str, Any], engine: str) -> list[dict[str, Any]]:
    return [c for c in item.get("checks", []) if c["engine"] == engine]


def build_cpu_seconds(item: dict[str, Any]) -> float:
    """CPU seconds of our stages (front end, GNF, classing, index): what the issue bounds."""
    return round(sum(item.get("cpu_seconds", {}).get(s, 0.0) for s in OURS), 3)


def build_wall_seconds(item: dict[str, Any]) -> float:
    return round(sum(item.get("seconds", {}).get(s, 0.0) for s in OURS), 3)


def grown_mb(item: dict[str, Any]) -> float:
    """Resident memory the item grew by, at its peak (the forked start holds the vocabulary)."""
    peaks = [v for v in item.get("peak_mb", {}).values()]
    return round(max(peaks) - item.get("start_mb", 0.0), 1) if peaks else 0.0


def summarize(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One corpus's numbers (the items of one corpus)."""
    accepted = [i for i in items if i["xgrammar"] == "accepts"]
    served = [i for i in accepted if i["verdict"] == "served"]
    s: dict[str, Any] = {
        "items": len(items),
        "xgrammar_accepts": len(accepted),
        "xgrammar_refuses": sum(i["xgrammar"] == "refuses" for i in items),
        "xgrammar_crashes": sum(i["xgrammar"] == "crashed" for i in items),
        "xgrammar_over_budget": sum(i["xgrammar"] == "over budget" for i in items),
        "served": len(served),
        "refused": sum(i["verdict"] == "refused" for i in accepted),
        "over_budget": sum(i["verdict"] == "over budget" for i in accepted),
        "failed": sum(i["verdict"] == "failed" for i in accepted),
        "crashed": sum(i["verdict"] == "crashed" for i in accepted),
        "refusals": dict(Counter(i["reason"] for i in accepted if i["verdict"] == "refused").most_common()),
        # the XGrammar constructs (SOURCES.txt of xgrammar-tests) of the items refused for each reason
        "refusal_features": {
            reason: dict(Counter(f for i in accepted if i["reason"] == reason for f in i.get("features", [])))
            for reason in {i["reason"] for i in accepted if i["verdict"] == "refused"}
        },
        "refusal_stages": dict(Counter(i["stage"] for i in accepted if i["verdict"] == "refused").most_common()),
        "over_budget_stages": dict(
            Counter(f"{i['stage']} ({i['reason']})" for i in accepted if i["verdict"] == "over budget").most_common()
        ),
        "failures": dict(Counter(i["reason"] for i in accepted if i["verdict"] in ("failed", "crashed")).most_common()),
        # the corpora's single instances (MaskBench's are counted under "tests")
        "instances_replayed": sum(c["docs"] > 0 for c in _first_checks(served) if not _has_tests(c)),
        "instances_refused_by_xgrammar": sum(
            c["docs_rejected"] > 0 for c in _first_checks(served) if not _has_tests(c)
        ),
        "tests": _tests(served),
    }
    for engine in (*ENGINES, SCHEMA_CHECK):
        checks = [c for i in served for c in _checks(i, engine)]
        s[engine] = {
            "steps": sum(c["steps"] for c in checks),
            "mismatches": sum(c["mismatches"] for c in checks),
            "items_mismatching": sorted(i["name"] for i in served for c in _checks(i, engine) if c["mismatches"]),
            "xgrammar_disagreements": sum(c["xgrammar_disagreements"] for c in checks),
            "disagreeing": sorted(i["name"] for i in served for c in _checks(i, engine) if c["xgrammar_disagreements"]),
            "errors": sorted(i["name"] for i in served for c in _checks(i, engine) if c.get("error")),
        }
    s["native"]["served_by_compressed"] = sorted(
        i["name"] for i in served for c in _checks(i, "native") if c.get("note")
    )
    done = [i for i in accepted if i["verdict"] in ("served", "refused")]
    cpu = [build_cpu_seconds(i) for i in done]
    s["build_cpu_seconds"] = {
        "median": round(statistics.median(cpu), 2) if cpu else 0.0,
        "max": round(max(cpu), 2) if cpu else 0.0,
    }
    s["guided"] = {  # TagDispatch grammars: walks that typed the tags (issue 19: walks must dispatch)
        "items": sum(bool(i.get("stats", {}).get("guides")) for i in served),
        "typed": sum(c.get("guides_typed", 0) for i in served for c in i.get("checks", []) if c["engine"] in ENGINES),
        # token-macro grammars (Token, ExcludeToken, TokenTagDispatch): steps that took a named id
        "token_items": sum(bool(i.get("stats", {}).get("token_guides")) for i in served),
        "token_steps": sum(
            c.get("guide_tokens_taken", 0) for i in served for c in i.get("checks", []) if c["engine"] in ENGINES
        ),
    }
    slowest = max(done, key=build_cpu_seconds, default=None)
    biggest = max(done, key=grown_mb, default=None)
    s["slowest"] = f"{slowest['name']}" if slowest else None
    s["biggest"] = f"{biggest['name']}" if biggest else None
    s["past_bounds"] = sorted(i["name"] for i in done if build_cpu_seconds(i) > BOUND_SECONDS or grown_mb(i) > BOUND_MB)
    s["grown_mb_max"] = max((grown_mb(i) for i in done), default=0.0)
    return s


def _first_checks(served: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compressed engine's check of each served item that has one."""
    return [_checks(i, "compressed")[0] for i in served if _checks(i, "compressed")]


def _has_tests(check: dict[str, Any]) -> bool:
    return bool(check.get("valid_docs", 0) or check.get("invalid_docs", 0))


def _tests(served: list[dict[str, Any]]) -> dict[str, int]:
    """MaskBench's instances over the served items (the compressed engine's replays; the native
    engine agreed with XGrammar token by token wherever no mismatch is counted): valid ones and how
    many XGrammar refused part-way, invalid ones and how many it refused (the rest it accepts)."""
    return {
        key: sum(c.get(key, 0) for c in _first_checks(served))
        for key in ("valid_docs", "valid_rejected", "invalid_docs", "invalid_rejected")
    }


def summarize_all(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_corpus: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_corpus.setdefault(item["corpus"], []).append(item)
    order = [c for c in ALL_NAMES if c in by_corpus] + sorted(c for c in by_corpus if c not in ALL_NAMES)
    return {c: summarize(by_corpus[c]) for c in order}


def _n(x: int) -> str:
    return f"{x:,}"


def _groups(counts: dict[str, int], top: int = 4) -> str:
    parts = [f"{n} {_short(k)}" for k, n in list(counts.items())[:top]]
    rest = sum(list(counts.values())[top:])
    return "; ".join(parts + ([f"{rest} other"] if rest else [])) or "–"


def _short(reason: str) -> str:
    """A refusal reason for a table cell: "TagDispatch(...): it scans free text for tags"."""
    reason = re.sub(r"^(GrammarError|ClassingLimitError|IndexTooLarge|GrammarCompileError): ", "", reason)
    m = re.match(
        r"cfgzip cannot reproduce the language of (.+?) exactly[;:]? ?(?:ignoring it would make token classes unsound: )?(.*)",
        reason,
    )
    if m:
        reason = f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    reason = re.sub(r"^unexpected …; expected an element.*", "a parse error (unexpected …)", reason)
    return reason if len(reason) <= 90 else reason[:90].rsplit(" ", 1)[0] + " …"


def _stages(counts: dict[str, int]) -> str:
    """``{"gnf (time)": 6, "classing (memory)": 1}`` → ``gnf 6, classing 1 (memory)``."""
    parts = []
    for key, n in counts.items():
        stage, _, what = key.partition(" (")
        parts.append(f"{stage} {n}" + ("" if what.startswith("time") else f" ({what}"))
    return ", ".join(parts)


def coverage_table(corpora: dict[str, Any]) -> str:
    """The README's markdown: one row per corpus, then every refusal reason with its count."""
    summary = corpora["summary"]
    lines = [
        "| corpus | items | XGrammar accepts | we serve | we refuse | over budget (stage) | failed / crashed "
        "| steps verified, compressed / native | mismatching steps, compressed / native |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for corpus, s in summary.items():
        total = s.get("corpus_items", s["items"])
        items = _n(s["items"]) if total == s["items"] else f"{_n(s['items'])} of {_n(total)} (seeded sample)"
        lines.append(
            f"| {corpus} | {items} | {_n(s['xgrammar_accepts'])} | {_n(s['served'])} | {_n(s['refused'])} "
            f"| {_n(s['over_budget'])}{' (' + _stages(s['over_budget_stages']) + ')' if s['over_budget'] else ''} "
            f"| {s['failed']} / {s['crashed']} | {_n(s['compressed']['steps'])} / {_n(s['native']['steps'])} "
            f"| {_n(s['compressed']['mismatches'])} / {_n(s['native']['mismatches'])}"
            f"{_mismatching(s)} |"
        )
    reasons: Counter[str] = Counter()
    per: dict[str, Counter[str]] = {}
    features: dict[str, Counter[str]] = {}
    for corpus, s in summary.items():
        for reason, n in s["refusals"].items():
            reasons[reason] += n
            per.setdefault(reason, Counter())[corpus] += n
            features.setdefault(reason, Counter()).update(s.get("refusal_features", {}).get(reason, {}))
    if reasons:
        lines += ["", "| refused because | items | of which | XGrammar constructs they use |", "|---|---|---|---|"]
        for reason, n in reasons.most_common():
            where = ", ".join(f"{c} {k}" for c, k in per[reason].most_common())
            cell = _short(reason).replace("|", "\\|")
            used = ", ".join(f"{f} {k}" for f, k in features[reason].most_common(4)) or "–"
            lines.append(f"| {cell} | {n} | {where} | {used} |")
    notes = []
    disagreeing = [
        f"{c}/{name}"
        for c, s in summary.items()
        for name in sorted(set(s["compressed"].get("disagreeing", [])) | set(s["native"].get("disagreeing", [])))
    ]
    n = sum(s[e]["xgrammar_disagreements"] for s in summary.values() for e in ENGINES)
    if n:
        notes.append(
            f"XGrammar's mask contradicted its own `accept_token` on {n:,} steps, counted apart "
            f"({', '.join(disagreeing)}): the engines follow the language there."
        )
    guided = sum(s.get("guided", {}).get("items", 0) for s in summary.values())
    if guided:
        typed = sum(s["guided"]["typed"] for s in summary.values())
        notes.append(f"{guided} TagDispatch grammars verified with walks that type their tags ({typed:,} typed).")
    handed = [f"{c}/{name}" for c, s in summary.items() for name in s["native"].get("served_by_compressed", [])]
    if handed:
        notes.append(
            f"The native engine handed requests to the compressed engine on {len(handed)} grammars "
            f"({', '.join(handed[:4])}{' …' if len(handed) > 4 else ''}: no index within its bounds, or past the "
            "state budget); their native steps are the compressed engine's."
        )
    token_items = sum(s.get("guided", {}).get("token_items", 0) for s in summary.values())
    if token_items:
        taken = sum(s["guided"]["token_steps"] for s in summary.values())
        notes.append(
            f"{token_items} token-macro grammars verified with walks that take the token ids they name "
            f"({taken:,} such steps, both engines)."
        )
    worst = [
        f"{c}: {s['build_cpu_seconds']['max']:g} s ({s['slowest']}), +{s['grown_mb_max']:,.0f} MB ({s['biggest']})"
        for c, s in summary.items()
        if s.get("slowest")
    ]
    if worst:
        notes.append(
            "Most CPU and memory one item served or refused took through the front end, GNF, classing and index "
            "(the issue's bound: "
            f"{BOUND_SECONDS:g} s, {BOUND_MB / 1024:g} GB): " + "; ".join(worst) + "."
        )
    tests = {k: sum(s.get("tests", {}).get(k, 0) for s in summary.values()) for k in ("valid_docs", "invalid_docs")}
    if tests["valid_docs"] or tests["invalid_docs"]:
        valid_refused = sum(s["tests"]["valid_rejected"] for s in summary.values())
        invalid_refused = sum(s["tests"]["invalid_rejected"] for s in summary.values())
        notes.append(
            f"MaskBench's instances replayed to their end through both engines: {tests['valid_docs']:,} valid "
            f"({valid_refused:,} refused by XGrammar itself), {tests['invalid_docs']:,} invalid ({invalid_refused:,} "
            "refused, at the same token by XGrammar and both engines; XGrammar accepts the rest)."
        )
    replayed = sum(s["instances_replayed"] for s in summary.values())
    refused = sum(s["instances_refused_by_xgrammar"] for s in summary.values())
    schema = sum(s[SCHEMA_CHECK]["steps"] for s in summary.values())
    schema_bad = sum(s[SCHEMA_CHECK]["mismatches"] for s in summary.values())
    notes.append(
        f"{replayed} instances replayed ({refused} of them refused part-way by XGrammar's own grammar, "
        f"as by both engines); XGrammar from the schema vs over its printed EBNF: {schema:,} steps, "
        f"{schema_bad} differing."
    )
    lines += ["", " ".join(notes), _runs_line(corpora)]
    return "\n".join(lines)


def _run_text(run: dict[str, Any]) -> str:
    settings = run.get("settings", {})
    return (
        f"`{run.get('command', 'benchmarks/sweep.py --corpora all')}` ({settings.get('tokenizer', '?')}, "
        f"{run.get('wall_seconds', 0) / 60:.0f} min wall on {settings.get('workers', '?')} workers of the shared "
        f"2-core machine{_load(run)}, {run.get('date', '')}; "
        f"cfgzip_lab at {run.get('package_commit', run.get('commit', '?'))})"
    )


def _runs_line(corpora: dict[str, Any]) -> str:
    """``Run: `command` (...)``; a sweep merged from several runs (``runs``: corpus → its run)
    names each run and its corpora."""
    runs: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for corpus, run in corpora.get("runs", {}).items():
        runs.setdefault(run.get("command", ""), (run, []))[1].append(corpus)
    if len(runs) <= 1:
        return f"Run: {_run_text(corpora)}."
    return "Runs: " + "; ".join(f"{', '.join(names)}: {_run_text(run)}" for run, names in runs.values()) + "."


def _load(corpora: dict[str, Any]) -> str:
    load = corpora.get("load")
    return f" at load {load['min']:g}-{load['max']:g}, median {load['median']:g}" if load else ""


def _mismatching(s: dict[str, Any]) -> str:
    names = sorted(set(s["compressed"]["items_mismatching"]) | set(s["native"]["items_mismatching"]))
    if not names:
        return ""
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f" ({shown})"


def update_readme(readme: Path, table: str) -> bool:
    """Replace the text between the coverage markers; False when README has no markers."""
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
    return True
