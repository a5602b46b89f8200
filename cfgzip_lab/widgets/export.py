"""Export: save and load the class cache (``.npz`` + metadata) with its grammar text beside it,
a report (a small JSON file, and beside it one self-contained HTML file that opens offline in any
browser, :mod:`.report_html`), and the ten lines that use the cache in one's own generation code.

Exports go to one folder, :func:`default_export_dir` (``exports/`` at the root of a source
checkout, which ``.gitignore`` ignores; ``$CFGZIP_EXPORT_DIR`` when set): the workbench runs
in ``notebooks/``, and a default that wrote there dirtied the repository. A relative path
typed into a field is taken inside that folder.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path

import ipywidgets as w

from .._version import __version__
from ..cache.format import CacheError, load_classes, read_metadata, save_classes
from ._base import Panel
from ._format import esc
from .session import WorkbenchError

# The file beside the saved EBNF that keeps what the user wrote, by input kind.
_SOURCE_SUFFIX = {
    "json_schema": ".json",
    "structural_tag": ".json",
    "gbnf": ".gbnf",
    "lark": ".lark",
    "regex": ".regex",
}

__all__ = ["ExportPanel", "build_report", "default_export_dir", "usage_snippet", "grammar_path_for"]

EXPORT_DIR_ENV = "CFGZIP_EXPORT_DIR"


def default_export_dir() -> Path:
    """Where exports go: ``$CFGZIP_EXPORT_DIR``, else ``exports/`` at the root of the source
    checkout this package runs from (git-ignored there), else ``./cfgzip_exports``."""
    if os.environ.get(EXPORT_DIR_ENV):
        return Path(os.environ[EXPORT_DIR_ENV]).expanduser()
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists() and (root / "pyproject.toml").is_file():
        return root / "exports"
    return Path.cwd() / "cfgzip_exports"


def grammar_path_for(cache_path: str | Path) -> Path:
    """The grammar text written beside a cache: ``name.npz`` → ``name.ebnf``."""
    return Path(cache_path).with_suffix(".ebnf")


def usage_snippet(
    grammar_path: str | Path,
    cache_path: str | Path,
    *,
    tokenizer: str = "smollm2",
    prompt: str = "A cat as JSON:",
    max_new_tokens: int = 16,
) -> str:
    """Ten lines of Python that load an exported cache and generate with it (transformers).

    The model line loads SmolLM2 (offline) when the cache is for ``smollm2``; for another
    tokenizer it names the model folder to fill in, since the classes fit only the
    vocabulary they were built for (``load_classes`` checks it and says so).
    """
    if tokenizer == "smollm2":
        model_line = 'model, tokenizer, vocab = cz.load_model("smollm2")  # or any HF model folder with this vocabulary'
    else:
        model_line = f"model, tokenizer, vocab = cz.load_model({_q(f'path/to/a/{tokenizer}/model')})  # the classes fit {tokenizer}"
    return "\n".join(
        [
            "import cfgzip_lab as cz",
            "from transformers import LogitsProcessorList",
            "",
            f'text = open({_q(grammar_path)}, encoding="utf-8").read()  # the grammar saved beside the cache',
            model_line,
            f"classes = cz.load_classes({_q(cache_path)}, grammar_text=text, vocab=vocab)  # checked against both",
            "engines = cz.compile_engines(text, vocab, classes)",
            "processor = cz.CompressedLogitsProcessor(engines)  # a transformers LogitsProcessor",
            f'inputs = tokenizer({_q(prompt)}, return_tensors="pt").to(model.device)',
            "out = model.generate(**inputs, logits_processor=LogitsProcessorList([processor]), "
            f"max_new_tokens={max_new_tokens}, do_sample=False)",
            'print(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))',
        ]
    )


def _q(value) -> str:
    """A Python string literal in double quotes (JSON's escapes are valid Python ones)."""
    return json.dumps(str(value), ensure_ascii=False)


def build_report(session) -> dict:
    """Grammar source and hash, tokenizer, counts and timings of a session, as plain JSON data.

    Timings are the ones measured for the current text and tokenizer; classing has one time
    (``timings_seconds.classing``, the same number the status line and Timings show)."""
    from .timings import pays, step_summary

    try:
        xgr_version = importlib.metadata.version("xgrammar")
    except importlib.metadata.PackageNotFoundError:
        xgr_version = None
    report = {
        "cfgzip_lab_version": __version__,
        "xgrammar_version": xgr_version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.machine(),
        },
    }
    report.update(session.summary())
    report["timings_seconds"] = {k: round(v, 6) for k, v in session.current_timings().items()}
    if session.classes is not None:
        report["classes_metadata"] = dict(session.classes.metadata)
    decode = step_summary(session)
    if decode and session.is_current(session.decoder_stamp):
        report["decode"] = decode
    verdicts = pays(session)
    if verdicts:
        # per basis (the decoder's steps, the benchmark's batch-1 replay), each labelled
        by_basis: dict[str, dict] = {}
        for v in verdicts:
            by_basis.setdefault(v["basis_kind"], {})[v["engine"]] = None if v["tokens"] == "never" else v["tokens"]
        report["pays_after_tokens"] = by_basis
    return report


class ExportPanel(Panel):
    """Export. Public methods: :meth:`export_cache`, :meth:`load_cache`, :meth:`export_report`."""

    error_sources = ("export cache", "load cache", "export report")

    def __init__(
        self,
        session,
        *,
        cache_path: str = "cfgzip_classes.npz",
        report_path: str = "cfgzip_report.json",
        folder: str | Path | None = None,
    ) -> None:
        super().__init__(session)
        self.folder = Path(folder) if folder is not None else default_export_dir()
        self.cache_path = w.Text(value=cache_path, description="Cache", layout=w.Layout(width="420px"))
        self.cache_path.add_class("cfgzip-cache-path")
        self.report_path = w.Text(value=report_path, description="Report", layout=w.Layout(width="420px"))
        self.report_path.add_class("cfgzip-report-path")
        save = self._button(
            "Save cache", "cfgzip-export-cache", self.export_cache, where="export cache", icon="save", style="primary"
        )
        load = self._button("Load cache", "cfgzip-load-cache", self.load_cache, where="load cache", icon="folder-open")
        report = self._button(
            "Export report", "cfgzip-export-report", self.export_report, where="export report", icon="file-text"
        )
        self.status = w.HTML()
        self.status.add_class("cfgzip-export-status")
        self.snippet = w.HTML()
        self.snippet.add_class("cfgzip-snippet")
        self.preview = w.HTML()
        self.preview.add_class("cfgzip-report-preview")
        self.widget = w.VBox(
            [
                w.HTML(
                    "A class cache is one <code>.npz</code> (class_of, representatives, class kinds, JSON metadata; "
                    "no pickle), saved with the grammar text beside it (<code>.ebnf</code>). Loading checks that it "
                    f"was built for this grammar text and tokenizer. Relative paths are inside "
                    f"<code>{esc(self.folder)}</code>."
                ),
                w.HBox([self.cache_path, save, load]),
                w.HBox([self.report_path, report]),
                self.status,
                self.error_box,
                self.snippet,
                self.preview,
            ]
        )
        self.widget.add_class("cfgzip-export")

    def _resolve(self, path: str | Path) -> Path:
        path = Path(path).expanduser()
        return path if path.is_absolute() else self.folder / path

    def export_cache(self, path: str | Path | None = None) -> Path:
        """Save the classes and, beside them, the grammar text; show the snippet that uses both."""
        s = self.session
        if s.classes is None:
            raise WorkbenchError("no classes to save: run classing first")
        if not s.classes_current:
            raise WorkbenchError("the classes are for an older grammar text: run classing again before saving")
        ebnf = s.grammar_text  # a schema's or a GBNF file's converted EBNF: what the engines compile
        target = save_classes(s.classes, self._resolve(path or self.cache_path.value), grammar_text=ebnf, vocab=s.vocab)
        grammar = grammar_path_for(target)
        grammar.write_text(ebnf, encoding="utf-8")
        if s.kind != "ebnf":  # keep what the user wrote beside what it became
            grammar.with_suffix(_SOURCE_SUFFIX[s.kind]).write_text(s.text, encoding="utf-8")
        self.cache_path.value = str(target)
        self.status.value = (
            f'<span class="cfgzip-ok">saved</span> {s.classes.num_classes:,} classes to '
            f"<code>{esc(target.resolve())}</code> and the grammar to <code>{esc(grammar.resolve())}</code>"
        )
        prompt = getattr(s, "decoder_prompt", "") or "Answer:"  # the decoder's, else one that names no grammar
        code = usage_snippet(grammar.resolve(), target.resolve(), tokenizer=s.vocab.name, prompt=prompt)
        self.snippet.value = (
            "<b>Use it in your code</b> (transformers; the cache and grammar above):"
            f'<pre class="cfgzip-code cfgzip-snippet-code" style="overflow:auto">{esc(code)}</pre>'
        )
        return target

    def load_cache(self, path: str | Path | None = None):
        """Load a cache built for the current grammar and the picked tokenizer (checked)."""
        s = self.session
        path = self._resolve(path or self.cache_path.value)
        s.require_grammar()
        meta_tokenizer = _peek_tokenizer(path) or s.tokenizer
        vocab = s.load_vocab(meta_tokenizer)
        started = time.perf_counter()
        classes = load_classes(path, grammar_text=s.grammar_text, vocab=vocab)
        s.set_classes(classes, vocab, str(path), seconds=time.perf_counter() - started)
        self.status.value = (
            f'<span class="cfgzip-ok">loaded</span> {classes.num_classes:,} classes from <code>{esc(path)}</code>'
        )
        return classes

    def export_report(self, path: str | Path | None = None) -> Path:
        """Write the JSON report to ``path`` and, beside it (``.html``), the HTML report: the grammar
        highlighted, the tests and their verdicts, railroad diagrams, class counts, timings and the
        usage snippet, in one file that needs no network (:mod:`.report_html`). Returns the JSON's path."""
        target = self._resolve(path or self.report_path.value)
        report = build_report(self.session)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=2, sort_keys=True, default=str), encoding="utf-8")
        page = self.export_html_report(target.with_suffix(".html"))
        self.report_path.value = str(target)
        self.status.value = (
            f'<span class="cfgzip-ok">report written</span> to <code>{esc(target.resolve())}</code> and '
            f'<code class="cfgzip-report-html">{esc(page.resolve())}</code> (one HTML file: open it in any browser, offline)'
        )
        self.preview.value = f'<pre class="cfgzip-code" style="max-height:18em;overflow:auto">{esc(json.dumps(report, indent=2, default=str))}</pre>'
        return target

    def export_html_report(self, path: str | Path) -> Path:
        """Write the self-contained HTML report to ``path`` (see :meth:`export_report`)."""
        from .report_html import render_report, report_data

        s = self.session
        cache = self._resolve(self.cache_path.value).resolve()
        snippet = ""
        if s.classes is not None:
            prompt = getattr(s, "decoder_prompt", "") or "Answer:"
            snippet = usage_snippet(grammar_path_for(cache), cache, tokenizer=s.vocab.name, prompt=prompt)
        target = self._resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render_report(report_data(s, snippet=snippet)), encoding="utf-8")
        return target


def _peek_tokenizer(path: Path) -> str | None:
    """The tokenizer name in a cache's metadata, to load the right vocabulary before checking."""
    try:
        return read_metadata(path).get("tokenizer")
    except CacheError:
        return None  # load_classes gives the real error message
