"""Renderers: the same :class:`~postmortem.model.Report` as HTML, Markdown or a terminal summary.

Each renderer is a pure function of the report (and, for the HTML charts, the timeline); none
re-runs analysis. :func:`redact` makes a shareable copy of both before rendering.
"""

from __future__ import annotations

from postmortem.render.html import render_html
from postmortem.render.markdown import render_markdown
from postmortem.render.redact import redact
from postmortem.render.terminal import render_terminal

__all__ = ["redact", "render_html", "render_markdown", "render_terminal"]
