"""The one error type raised for invalid scene descriptions."""

from __future__ import annotations


class SpecError(ValueError):
    """A scene description is invalid: `field` is the dotted path of the culprit, `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def under(self, parent: str) -> SpecError:
        """The same error with its field path prefixed by `parent` (a containing field)."""
        if not parent:
            return self
        if not self.field:
            return SpecError(parent, self.reason)
        sep = "" if self.field.startswith("[") else "."
        return SpecError(f"{parent}{sep}{self.field}", self.reason)
