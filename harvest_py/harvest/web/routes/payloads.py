"""Payload erasure and legal holds (docs/payloads.md). Thin over the SQL calls `harvest workflow
erase-payloads` and `harvest workflow legal-hold set|release` make; admin only.

An erasure over shards scrubs the live run (where the terminal-state and legal-hold gates are
judged) and then every prior residence a rebalance left (as ``harvest.shard.erasure`` does for
the CLI); a residence that cannot be reached fails the call, and calling it again finishes.
"""

from __future__ import annotations

from typing import Any

from harvest.web.routes import BOOLEAN, STRING, Call, Endpoint, Param, body, path, shape

EXECUTION = path("execution_id", "uuid", "The execution id (a UUID).")


async def erase_payloads(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    operator = data.get("operator_id") or call.operator_id
    summary = await call.routed(execution_id, lambda sql: sql.erase_payloads(execution_id, operator))
    prior = []
    if call.sharded:
        for shard in summary.get("residences", {}).get("migrated_from_shards") or []:
            if shard == summary.get("shard_id"):
                continue
            scrubbed = await call.on_shard(
                shard, lambda sql: sql.erase_payloads(execution_id, operator, True)
            )
            prior.append({"shard_id": shard, **scrubbed})
    return {**summary, "prior_residences": prior}


async def set_legal_hold(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    operator = data.get("operator_id") or call.operator_id
    return await call.routed(
        execution_id, lambda sql: sql.set_legal_hold(execution_id, data["reason"], operator)
    )


async def release_legal_hold(call: Call, args: dict[str, Any], _: Any) -> Any:
    """A DELETE has no body: the operator the audit log records is the ``operator_id``
    parameter (the CLI's --operator-id), else the token's actor."""
    execution_id = args["execution_id"]
    operator = args["operator_id"] or call.operator_id
    return await call.routed(execution_id, lambda sql: sql.release_legal_hold(execution_id, operator))


ENDPOINTS = [
    Endpoint(
        "POST",
        "/workflows/{execution_id}/erase-payloads",
        "admin",
        erase_payloads,
        "Erase a terminal execution's payloads everywhere it lives (refused while held or open).",
        (EXECUTION,),
        body({"operator_id": STRING}),
        responses={
            200: "Erased",
            404: "No such execution",
            409: "A legal hold is set (HR030) or the run is open (HR031)",
        },
        tag="payloads",
        shape=shape(execution_id=STRING, prior_residences={"type": "array"}),
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/legal-hold",
        "admin",
        set_legal_hold,
        "Set a legal hold: the execution's payloads cannot be erased until it is released.",
        (EXECUTION,),
        body({"reason": STRING, "operator_id": STRING}, ("reason",)),
        responses={200: "Held", 404: "No such execution"},
        tag="payloads",
        shape=shape(execution_id=STRING, legal_hold=BOOLEAN),
    ),
    Endpoint(
        "DELETE",
        "/workflows/{execution_id}/legal-hold",
        "admin",
        release_legal_hold,
        "Release an execution's legal hold (released: false when it had none).",
        (EXECUTION, Param("operator_id", description="Who releases it, for the audit log (default: you).")),
        responses={200: "Released", 404: "No such execution"},
        tag="payloads",
        shape=shape(execution_id=STRING, legal_hold=BOOLEAN, released=BOOLEAN),
    ),
]
