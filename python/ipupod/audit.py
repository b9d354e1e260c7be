"""The server's audit log (AuditService, proto/ipupod/v1/audit.proto): every privileged or
destructive action, allowed or refused, and the server's own start, stop and config reloads.
Only admins may read it (docs/operations.md, "Audit log").
"""

from __future__ import annotations

from typing import List

import grpc

from ipupod import errors
from ipupod._proto import audit_pb2
from ipupod.calls import Calls, Time, unix_ms

#: The actions the server records (AuditRecord.action).
ACTIONS = ("fault.inject", "ipu.reset", "partition.reset", "session.reset", "pod.reset",
           "ipu.repair", "partition.remove.force", "session.detach.other", "job.cancel.other",
           "config.reload", "server.start", "server.stop")
#: Records the server sends in one page at most.
PAGE_MAX = 1000
#: Records one call to ``Client.audit`` returns at most.
LIMIT_MAX = 100000


class AuditMixin:
    """AuditService calls of :class:`ipupod.Client`, made through the client's
    :class:`ipupod.calls.Calls`."""

    _calls: Calls

    def audit(self, since: Time = None, until: Time = None, user: str = "", action: str = "",
              limit: int = 100, page_token: str = "") -> List[audit_pb2.AuditRecord]:
        """The audit log's records, oldest first (``ipupod audit``), in [since, until)
        (datetimes or Unix seconds; None = from the first record / no end), optionally only
        one ``user``'s or one ``action`` (see ``ipupod.audit.ACTIONS``), at most ``limit``
        (1..100000), read page by page. Each record has ``seq``, ``time_unix_ms``, ``user``,
        ``admin``, ``peer``, ``action``, ``target``, ``details``, ``code`` ("OK" or the error's
        code name) and ``message``. ``page_token`` continues after a previous read: the
        ``seq`` of the last record it returned, as a string.

        Raises ``ipupod.Error``: PERMISSION_DENIED unless the caller is an admin;
        INVALID_ARGUMENT for an unknown action or an empty window (checked here first).
        """
        location = "Client.audit"
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
            raise errors.local_error(f"limit must be 1..{LIMIT_MAX}, not {limit!r}",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)
        if action and action not in ACTIONS:
            raise errors.local_error(f"action {action!r} is not one of {', '.join(ACTIONS)}",
                                     grpc.StatusCode.INVALID_ARGUMENT, location)
        request = audit_pb2.ListAuditRequest(
            since_unix_ms=unix_ms(since, "since", location),
            until_unix_ms=unix_ms(until, "until", location), user=user, action=action,
            page_token=page_token)
        records: List[audit_pb2.AuditRecord] = []
        while True:
            request.limit = min(limit - len(records), PAGE_MAX)
            page = self._calls.unary(self._calls.audit.ListAudit, request,
                                     "AuditService.ListAudit")
            records.extend(page.records)
            if not page.next_page_token or len(records) >= limit:
                return records
            request.page_token = page.next_page_token
