"""The one base class for errors a user can cause (bad file, bad option, unknown device).

Every CLI catches :class:`UserError` and prints its message on one line with a non-zero
exit, never a traceback; the gRPC servers map it to INVALID_ARGUMENT (or a subclass's
status). Subclass it for each failure family so callers can tell them apart.
"""
from __future__ import annotations


class UserError(Exception):
    """An error caused by the input, with a precise one-line message."""

    #: gRPC status name the service answers with for this error.
    grpc_status: str = "INVALID_ARGUMENT"


class NotFoundError(UserError):
    grpc_status = "NOT_FOUND"


class TooLargeError(UserError):
    grpc_status = "RESOURCE_EXHAUSTED"
