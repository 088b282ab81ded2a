"""griffe extensions for the API reference (mkdocs.yml loads them; they are not part of vecenv).

Defaults: the vector env signatures name their defaults from ``vecenv.options.DEFAULTS``
(``copy: bool = DEFAULTS.copy``), which a static reading shows as the bare name; the signatures
in the reference show the values instead (``copy: bool = True``).

Roles: vecenv's docstrings use Sphinx roles (:class:`~vecenv.parent.pool.WorkerPool`) and reST literal
blocks (a paragraph ending in ``::``). mkdocstrings renders docstrings as Markdown, where those
would show as raw markup: this turns each role into inline code (the last dotted part where the
target starts with ``~``, as Sphinx shows it) and each ``::`` into ``:``, leaving the indented
block after it, which Markdown already renders as code.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import griffe

from vecenv.options import DEFAULTS

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")
_LITERAL_BLOCK = re.compile(r"(\S)::$|^::$", re.M)


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def markdown(text: str) -> str:
    """``text`` with Sphinx roles as inline code and reST ``::`` block openers as ``:``."""
    text = _ROLE.sub(_role, text)
    return _LITERAL_BLOCK.sub(lambda m: f"{m.group(1)}:" if m.group(1) else "", text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)


def _literal(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


class SharedDefaultsAsValues(griffe.Extension):
    """Replace each ``DEFAULTS.<keyword>`` parameter default with the keyword's value."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if not isinstance(obj, griffe.Function):
            return
        for parameter in obj.parameters:
            default = str(parameter.default) if parameter.default is not None else ""
            if default.startswith("DEFAULTS."):
                parameter.default = _literal(getattr(DEFAULTS, default.removeprefix("DEFAULTS.")))
