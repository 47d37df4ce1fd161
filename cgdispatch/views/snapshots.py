"""Static snapshots of the dashboards, so that a notebook exported to HTML shows them with no
network and no kernel.

A widget needs a widget manager (JavaScript from a CDN) and a live kernel to render; an
HTML export has neither. :class:`Snapshot` adds a ``text/html`` form to a widget's display
bundle: what the widget shows at display time (its HTML boxes as they are, its images inline
as PNG, each control's description and value). ``scripts/run_notebooks.py`` keeps that form
in the offline report; a live notebook still renders the interactive widget.
"""

from __future__ import annotations

import base64
import html
from typing import Any

import ipywidgets as w

__all__ = ["Snapshot", "static_html"]

_NOTE = (
    "<div style='color:#666;font-size:11px'>static snapshot of an interactive widget "
    "(open the notebook with a running kernel to use its controls)</div>"
)


def static_html(widget: Any) -> str:
    """``widget`` and its children as plain HTML: what it shows now, no JavaScript."""
    if isinstance(widget, w.Box):
        tag = "span" if isinstance(widget, w.HBox) else "div"
        inner = " ".join(static_html(child) for child in widget.children)
        return f"<{tag} style='display:block;margin:2px 0'>{inner}</{tag}>"
    if isinstance(widget, w.HTML):
        return str(widget.value)
    if isinstance(widget, w.Image):
        data = bytes(widget.value or b"")
        if not data:
            return ""
        encoded = base64.b64encode(data).decode("ascii")
        return f"<img style='max-width:100%' src='data:image/{widget.format};base64,{encoded}'/>"
    if isinstance(widget, w.Button):
        return ""  # an action, not a state
    value = getattr(widget, "value", None)
    if value is None:
        return ""
    label = html.escape(str(getattr(widget, "description", "") or ""))
    shown = html.escape(", ".join(map(str, value)) if isinstance(value, tuple) else str(value))
    return f"<span style='margin-right:1em'>{label + ': ' if label else ''}<b>{shown}</b></span>"


class Snapshot:
    """Mix-in for a widget class: its display bundle also carries :func:`static_html`."""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if bundle is not None:
            bundle["text/html"] = _NOTE + static_html(self)
        return bundle
