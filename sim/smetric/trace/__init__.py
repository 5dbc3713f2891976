"""Trace loading: one typed request/session model for every supported trace format."""

from smetric.trace.model import Trace, TraceRequest

__all__ = ["Trace", "TraceRequest"]
