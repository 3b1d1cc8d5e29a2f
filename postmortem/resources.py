"""Where the bundled rules and templates are, in a source checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _resource(name: str) -> Path:
    # A wheel carries them inside the package (pyproject force-include); a checkout has them
    # at the top of the repository, next to the package.
    bundled = _PACKAGE / "_bundled" / name
    return bundled if bundled.is_dir() else _PACKAGE.parent / name


def rules_dir() -> Path:
    """The directory of built-in rule files."""
    return _resource("rules")


def templates_dir() -> Path:
    """The directory of report templates."""
    return _resource("templates")
