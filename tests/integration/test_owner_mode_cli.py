"""`harvest shard owner-mode status|on|off` on one database (no [shards]): the switch, the
lease, the audit row naming the operator, and a reader's role refused."""

from __future__ import annotations

import json

from operator_helpers import harvest
from test_roles import login  # noqa: F401  (the fixture: a LOGIN user in one role)

from harvest.core.errors import PermissionDenied


def status(dsn: str) -> dict:
    r = harvest(dsn, "shard", "owner-mode", "status", "--output", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_on_with_a_lease_and_off_are_audited(db: str, conn) -> None:
    [row] = status(db)["shards"]
    assert (row["shard_id"], row["enabled"], row["owned"], row["by_worker"]) == (0, False, 0, {})

    r = harvest(db, "shard", "owner-mode", "on", "--lease-secs", "45", "--operator-id", "ops-alice")
    assert r.returncode == 0, r.stderr
    assert "on" in r.stdout and "45" in r.stdout
    [row] = status(db)["shards"]
    assert (row["enabled"], row["lease_secs"]) == (True, 45)

    # A worker's owner rows show up per worker (only live leases count).
    conn.execute(
        "UPDATE harvest.partition_owners SET worker_id = 'w1', epoch = epoch + 1,"
        " lease_expires_at = now() + interval '1 hour' WHERE partition_id < 3"
    )
    conn.execute(
        "UPDATE harvest.partition_owners SET worker_id = 'w2', epoch = epoch + 1,"
        " lease_expires_at = now() - interval '1 hour' WHERE partition_id = 3"
    )
    [row] = status(db)["shards"]
    assert (row["owned"], row["by_worker"]) == (3, {"w1": 3})
    table = harvest(db, "shard", "owner-mode", "status")
    assert table.returncode == 0 and "w1=3" in table.stdout
    # `on` again (a new lease) keeps the owners, and says so.
    r = harvest(
        db, "shard", "owner-mode", "on", "--lease-secs", "45", "--operator-id", "ops-alice", "-o", "json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shards"][0]["by_worker"] == {"w1": 3}

    r = harvest(db, "shard", "owner-mode", "off", "--operator-id", "ops-bob", "--output", "json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["shards"]
    assert (row["enabled"], row["lease_secs"], row["owned"]) == (False, 45, 0)

    audit = conn.execute(
        "SELECT operation, target, operator_id, source, details->>'lease_secs'"
        " FROM harvest.audit_log ORDER BY id"
    ).fetchall()
    assert audit == [
        ("owner_mode.set", "on", "ops-alice", "cli", "45"),
        ("owner_mode.set", "on", "ops-alice", "cli", "45"),
        ("owner_mode.set", "off", "ops-bob", "cli", "45"),
    ]


def test_switching_needs_an_operator_and_a_lease_in_range(db: str, conn) -> None:
    r = harvest(db, "shard", "owner-mode", "on")
    assert r.returncode != 0 and "--operator-id" in r.stderr
    r = harvest(db, "shard", "owner-mode", "on", "--lease-secs", "0", "--operator-id", "ops")
    assert r.returncode == 2 and "--lease-secs" in r.stderr
    assert conn.execute("SELECT count(*) FROM harvest.audit_log").fetchone()[0] == 0
    assert status(db)["shards"][0]["enabled"] is False


def test_a_reader_may_read_but_not_switch(db: str, login) -> None:  # noqa: F811
    reader = login("harvest_reader")
    assert status(reader)["shards"][0]["enabled"] is False
    r = harvest(reader, "shard", "owner-mode", "on", "--operator-id", "ops-eve")
    assert r.returncode == PermissionDenied.exit_code, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "permission" in r.stderr.lower()
    assert status(db)["shards"][0]["enabled"] is False
