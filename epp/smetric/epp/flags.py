"""Moved to :mod:`smetric.core.pickerflags` (the picker and the operator both read it); this
re-export keeps ``smetric.epp.flags`` imports written before the move working."""

from smetric.core.pickerflags import (
    FLAGS,
    Flag,
    build_parser,
    ignored_upstream_flags,
    parse_bool,
    render_args,
)

__all__ = ["FLAGS", "Flag", "build_parser", "ignored_upstream_flags", "parse_bool", "render_args"]
