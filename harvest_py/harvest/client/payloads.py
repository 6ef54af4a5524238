"""The client's side of the payload policy (docs/payloads.md): what a client writes is encoded
by its codecs; what it reads has its offloaded payloads resolved and its envelopes decoded.

Shared by ``Client`` and ``AsyncClient`` as steps (harvest.db.steps), so one read path serves both.
"""

from __future__ import annotations

from typing import Any

from harvest.core.codecs import Payloads, refs_in, replace_refs
from harvest.db import sqlapi
from harvest.db.steps import Sql, Steps

_NONE = Payloads()


def of(client: Any) -> Payloads:
    """The client's payload policy (no codecs for an object that has none)."""
    return getattr(client, "payloads", None) or _NONE


def decoded(payloads: Payloads | None, value: Any) -> Steps[Any]:
    """``value`` with its references resolved (from the default store, ``harvest.payloads`` of the
    database the read came from) and its envelopes decoded."""
    ids = refs_in(value)
    if ids:
        value = replace_refs(value, (yield Sql(sqlapi.get_payloads, ids)))
    return (payloads or _NONE).chain.decode_tree(value)
