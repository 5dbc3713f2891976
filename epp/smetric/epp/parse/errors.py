"""The one error type of the request path: an HTTP status and a message for the client."""

from __future__ import annotations


class RequestError(Exception):
    """A request the picker answers itself (Envoy ``ImmediateResponse``) instead of routing it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self) -> tuple[type[RequestError], tuple[int, str]]:
        """Picklable as itself: a parse worker process raises it (``server.offload``)."""
        return (RequestError, (self.status, self.message))

    def __repr__(self) -> str:
        return f"RequestError({self.status}, {self.message!r})"
