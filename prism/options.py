"""Settings objects: a frozen dataclass of what a call may be told, instead of a dozen keyword arguments.

`SearchOptions` (prism.search.options) and `TuneOptions` (prism.tune.options) are such objects. Each is
built by `of(options, who, **changes)` from an instance, a dict of its fields, or None (the defaults), with
keyword arguments as changes, so that `search(g, time_limit=5)` and `search(g, SearchOptions(time_limit=5))`
are one call; a name that is not a field is an InputError that lists the fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, TypeVar

from prism.errors import InputError

__all__ = ["Settings"]

S = TypeVar("S", bound="Settings")


class Settings:
    """The base of a frozen dataclass of settings: `of` and `checked` (each subclass checks its values)."""

    WHAT: ClassVar[str] = "options"
    """What the settings are called in messages ("search options")."""

    @classmethod
    def of(cls: type[S], options: S | Mapping[str, Any] | None = None, who: str = "", **changes: Any) -> S:
        """`options` (an instance, a dict of fields, or None: the defaults) with `changes` applied, checked; an
        InputError, starting with `who`, for anything else or a name that is not a field."""
        who = who or cls.WHAT
        if options is not None and not isinstance(options, (cls, Mapping)):
            raise InputError(f"{who}: {cls.WHAT} must be a {cls.__name__} or a dict of its fields, "
                             f"got {type(options).__name__}")
        fields = dict(options) if isinstance(options, Mapping) else {}
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted((set(fields) | set(changes)) - set(names))
        if unknown:
            raise InputError(f"{who}: no {cls.WHAT[:-1] if cls.WHAT.endswith('s') else cls.WHAT} "
                             f"{', '.join(map(repr, unknown))}; they are {', '.join(names)}")
        base = options if isinstance(options, cls) else cls()
        return dataclasses.replace(base, **fields, **changes).checked(who)  # type: ignore[type-var]

    def checked(self: S, who: str) -> S:
        """These settings, or an InputError naming a value that could only do nothing (or not what was asked)."""
        return self
