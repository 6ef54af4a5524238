"""Task tokens: the name of one attempt of one activity, for completing it elsewhere.

An activity that returns "completed elsewhere" (``raise ctx.complete_async()``) hands its
``ctx.task_token`` to whatever finishes the work; that process completes, fails or
heartbeats the activity by the token (``Client.complete_activity(token, result)``,
``harvest activity complete``, ``harvest.complete_activity_by_token``). The token is
``v1:<execution_id>:<task_id>:<seq>:<attempt>:<fencing_token>``: the execution id routes
it to its shard, the fencing token fences it as a worker's claim is fenced
(functions/lifecycle.sql). It grants nothing by itself: the caller still needs the
database role (``harvest_operator``).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from harvest.core.errors import InvalidArgument

_FORMAT = re.compile(r"^v1:([0-9a-f-]{36}):(\d{1,18}):(\d{1,9}):(\d{1,9}):(\d{1,18})$")


@dataclass(frozen=True)
class TaskToken:
    execution_id: str
    task_id: int
    seq: int
    attempt: int
    fencing_token: int

    def __str__(self) -> str:
        return f"v1:{self.execution_id}:{self.task_id}:{self.seq}:{self.attempt}:{self.fencing_token}"

    @classmethod
    def parse(cls, token: str) -> TaskToken:
        """The parts of a token; InvalidArgument when ``token`` is not one."""
        found = _FORMAT.match(token.strip()) if isinstance(token, str) else None
        if found is None:
            raise InvalidArgument(
                f"{str(token)[:120]!r} is not a Harvest task token: pass the token the activity "
                "read from ctx.task_token, unchanged"
            )
        try:
            execution_id = str(uuid.UUID(found.group(1)))
        except ValueError:
            raise InvalidArgument(f"{token[:120]!r} is not a Harvest task token (bad execution id)") from None
        return cls(execution_id, *(int(found.group(i)) for i in range(2, 6)))
