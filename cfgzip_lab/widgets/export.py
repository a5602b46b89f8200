"""Export: save and load the class cache (``.npz`` + metadata), and a small JSON report."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import time
from pathlib import Path

import ipywidgets as w

from .. import __version__
from ..classes.cache import CacheError, load_classes, read_metadata, save_classes
from ._base import Panel
from ._format import esc
from .session import WorkbenchError

__all__ = ["ExportPanel", "build_report"]


def build_report(session) -> dict:
    """Grammar hash, tokenizer, counts and timings of a session, as plain JSON data."""
    from .timings import step_summary

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
    report["timings_seconds"] = {k: round(v, 6) for k, v in session.timings.items()}
    if session.classes is not None:
        report["classes_metadata"] = dict(session.classes.metadata)
    decode = step_summary(session)
    if decode:
        report["decode"] = decode
    return report


class ExportPanel(Panel):
    """Export. Public methods: :meth:`export_cache`, :meth:`load_cache`, :meth:`export_report`."""

    error_sources = ("export cache", "load cache", "export report")

    def __init__(
        self, session, *, cache_path: str = "cfgzip_classes.npz", report_path: str = "cfgzip_report.json"
    ) -> None:
        super().__init__(session)
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
        self.preview = w.HTML()
        self.preview.add_class("cfgzip-report-preview")
        self.widget = w.VBox(
            [
                w.HTML(
                    "A class cache is one <code>.npz</code> (class_of, representatives, class kinds, JSON metadata; "
                    "no pickle). Loading checks that it was built for this grammar text and tokenizer."
                ),
                w.HBox([self.cache_path, save, load]),
                w.HBox([self.report_path, report]),
                self.status,
                self.error_box,
                self.preview,
            ]
        )
        self.widget.add_class("cfgzip-export")

    def export_cache(self, path: str | Path | None = None) -> Path:
        s = self.session
        if s.classes is None:
            raise WorkbenchError("no classes to save: run classing first")
        if not s.classes_current:
            raise WorkbenchError("the classes are for an older grammar text: run classing again before saving")
        target = save_classes(s.classes, path or self.cache_path.value, grammar_text=s.text, vocab=s.vocab)
        self.cache_path.value = str(target)
        self.status.value = f'<span class="cfgzip-ok">saved</span> {s.classes.num_classes:,} classes to <code>{esc(target.resolve())}</code>'
        return target

    def load_cache(self, path: str | Path | None = None):
        """Load a cache built for the current grammar and the picked tokenizer (checked)."""
        s = self.session
        path = Path(path or self.cache_path.value).expanduser()
        s.require_grammar()
        meta_tokenizer = _peek_tokenizer(path) or s.tokenizer
        vocab = s.load_vocab(meta_tokenizer)
        classes = load_classes(path, grammar_text=s.text, vocab=vocab)
        s.set_classes(classes, vocab, str(path))
        self.status.value = (
            f'<span class="cfgzip-ok">loaded</span> {classes.num_classes:,} classes from <code>{esc(path)}</code>'
        )
        return classes

    def export_report(self, path: str | Path | None = None) -> Path:
        target = Path(path or self.report_path.value).expanduser()
        report = build_report(self.session)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=2, sort_keys=True, default=str), encoding="utf-8")
        self.report_path.value = str(target)
        self.status.value = f'<span class="cfgzip-ok">report written</span> to <code>{esc(target.resolve())}</code>'
        self.preview.value = f'<pre class="cfgzip-code" style="max-height:18em;overflow:auto">{esc(json.dumps(report, indent=2, default=str))}</pre>'
        return target


def _peek_tokenizer(path: Path) -> str | None:
    """The tokenizer name in a cache's metadata, to load the right vocabulary before checking."""
    try:
        return read_metadata(path).get("tokenizer")
    except CacheError:
        return None  # load_classes gives the real error message
