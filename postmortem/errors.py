"""Exceptions a user can cause, each with a one-line message that says what was expected.

::

    PostmortemError
    ├── InputError          the job path is missing, empty, or holds nothing readable
    ├── RuleError           a rule file is malformed (names the file, the field and why)
    └── ReportError         a report could not be written

Anything else escaping the library is a bug and keeps its traceback.
"""

from __future__ import annotations


class PostmortemError(Exception):
    """Base class of the errors the CLI reports as one line with exit code 2."""


class InputError(PostmortemError):
    """The job path cannot be analyzed: it does not exist, is empty, or has no readable file."""


class RuleError(PostmortemError):
    """A rule file is malformed."""


class ReportError(PostmortemError):
    """A report could not be written."""
