"""One message for a pydantic ``ValidationError``: ``where: message; ...`` per problem."""

from __future__ import annotations

from pydantic import ValidationError


def describe(
    exc: ValidationError,
    *,
    top_level: str | None = "(top level)",
    unknown_key: bool = False,
    strip_value_error: bool = False,
) -> str:
    """Each problem as ``where: message`` (``where``: the dotted location), joined by ``; ``.

    ``top_level``: the location written for a problem of the whole document (None: the message
    alone); ``unknown_key``: an extra key reads ``unknown key`` instead of pydantic's wording;
    ``strip_value_error``: a validator's message without pydantic's ``Value error, `` prefix.
    """
    parts: list[str] = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or top_level
        msg = err["msg"]
        if unknown_key and err["type"] == "extra_forbidden":
            msg = "unknown key"
        if strip_value_error:
            msg = msg.removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)
