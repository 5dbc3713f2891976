"""Trace loading: one typed request/session model for every supported trace format."""

from smetric.trace.agentic import load_agentic
from smetric.trace.errors import TraceFormatError
from smetric.trace.formats import FORMATS, detect_format, load_trace
from smetric.trace.model import Trace, TraceRequest
from smetric.trace.workload import (
    AgentStart,
    SteadyAgents,
    agents_for_rate,
    closed_loop_send_time,
    family_durations_s,
    family_start_times,
    poisson_family_arrivals,
    recorded_family_start_times,
    subsample_families,
)

__all__ = [
    "FORMATS",
    "AgentStart",
    "SteadyAgents",
    "Trace",
    "TraceFormatError",
    "TraceRequest",
    "agents_for_rate",
    "closed_loop_send_time",
    "detect_format",
    "family_durations_s",
    "family_start_times",
    "load_agentic",
    "load_trace",
    "poisson_family_arrivals",
    "recorded_family_start_times",
    "subsample_families",
]
