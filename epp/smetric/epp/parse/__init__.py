"""Request parsing for the picker: HTTP headers, OpenAI / Anthropic bodies, response usage."""

from smetric.epp.parse.body import ParsedBody, parse_body
from smetric.epp.parse.errors import RequestError
from smetric.epp.parse.headers import RequestHeaders, parse_headers
from smetric.epp.parse.usage import Usage, UsageReader

__all__ = [
    "ParsedBody",
    "RequestError",
    "RequestHeaders",
    "Usage",
    "UsageReader",
    "parse_body",
    "parse_headers",
]
