"""Messages into a run while its workers die: signals, updates and cancels keep their promises.

* a signal sent while workers are SIGKILLed is delivered exactly once, in send order;
* an update accepted just before a crash is applied exactly once, and asking again with
  its update_id (in flight or after it finished) never applies it twice;
* a cancel racing a completion ends each run in exactly one terminal state.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
from apps import wf_collect, wf_entity, wf_short, wf_signals, wf_updates
from harness import check_history, count_events, history, query, runs, wait_until

import harvest
from harvest.core.errors import InvalidArgument, WorkflowCancelled, WorkflowNotRunning

pytestmark = pytest.mark.chaos

TERMINAL_EVENTS = (
    "WorkflowCompleted",
    "WorkflowFailed",
    "WorkflowTerminated",
    "WorkflowCancelled",
    "WorkflowTimedOut",
    "WorkflowContinuedAsNew",
)


def _first_local_runs(dsn: str, execution_id: str) -> list[dict]:
    """The first run of every local-activity invocation of the execution (by seq)."""
    return query(
        dsn,
        "SELECT DISTINCT ON (seq) * FROM chaos_runs WHERE execution_id = %s "
        "AND kind = 'local' ORDER BY seq, id",
        (execution_id,),
    )


# ---------------------------------------------------------------------- 1. signals
SIGNALS = 36
HOLDS = [5, 17, 29]  # these values are processed by a workflow task held until killed


def test_signals_sent_while_workers_die_arrive_once_in_order(chaos_db, workers, client):
    for _ in range(2):
        workers.start(concurrency=4, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)
    handle = client.start_workflow(wf_signals, SIGNALS, HOLDS)
    eid = handle.execution_id

    sent: list[int] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            for i in range(SIGNALS):
                handle.signal("item", i)
                sent.append(i)
                time.sleep(0.12)
        except BaseException as exc:
            errors.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    rng = random.Random(4321)
    by_pid = {}
    killed_holding: set[int] = set()  # chaos_runs ids of held first runs whose worker we killed
    kills = 0
    next_random_kill = time.monotonic() + rng.uniform(0.5, 1.0)
    deadline = time.monotonic() + 30
    while sender.is_alive() or len(killed_holding) < len(HOLDS):
        assert time.monotonic() < deadline, (
            f"stuck: sent {len(sent)}, held kills {len(killed_holding)}\n{history(chaos_db, eid)[-10:]}"
        )
        by_pid.update({p.pid: p for p in workers.procs})
        held = [
            r
            for r in _first_local_runs(chaos_db, eid)
            if r["finished_at"] is None and r["id"] not in killed_holding
        ]
        for row in held:
            # That worker is inside the workflow task processing a held signal: kill it there
            # (unless a random kill already did).
            holder = by_pid[row["worker_pid"]]
            killed_holding.add(row["id"])
            if holder.poll() is None:
                workers.kill(holder)
                kills += 1
                workers.start(concurrency=4, wait=False)
        if not held and sender.is_alive() and time.monotonic() > next_random_kill:
            workers.kill(rng.choice(workers.alive()))
            kills += 1
            workers.start(concurrency=4, wait=False)
            next_random_kill = time.monotonic() + rng.uniform(0.5, 1.0)
        time.sleep(0.03)
    sender.join(timeout=10)
    assert not errors, errors
    assert sent == list(range(SIGNALS))
    assert kills >= 6, kills

    assert handle.result(timeout=30) == list(range(SIGNALS))
    events = history(chaos_db, eid)
    check_history(events)
    received = [e["event_data"] for e in events if e["event_type"] == "SignalReceived"]
    assert len(received) == SIGNALS
    assert [s["payload"] for s in received] == list(range(SIGNALS)), "signals out of send order"
    assert len({s["signal_id"] for s in received}) == SIGNALS
    # Every held step was interrupted by the kill and redone by another worker; the history
    # keeps one result of it, the last run's (a random kill can also land on the worker redoing
    # it before its decision commits, and a third run redoes it again: CI saw run3 once).
    local = _first_local_runs(chaos_db, eid)
    assert len(local) == len(HOLDS) and all(r["finished_at"] is None for r in local)
    assert all(by_pid[r["worker_pid"]].poll() is not None for r in local), "a holder survived"
    markers = [e["event_data"] for e in events if e["event_type"] == "MarkerRecorded"]
    runs_per_step = [
        query(
            chaos_db,
            "SELECT count(*) AS n FROM chaos_runs WHERE execution_id = %s AND kind = 'local' AND seq = %s",
            (eid, r["seq"]),
        )[0]["n"]
        for r in local
    ]
    assert all(n >= 2 for n in runs_per_step), runs_per_step
    assert [m["value"]["result"] for m in markers] == [f"run{n}" for n in runs_per_step]
    # Each non-held signal scheduled exactly one activity.
    scheduled = Counter(e["event_data"]["input"][0] for e in events if e["event_type"] == "ActivityScheduled")
    assert scheduled == Counter(f"sig{i}" for i in range(SIGNALS) if i not in HOLDS)


# ---------------------------------------------------------------------- 2. updates
UPDATES = [("u0", "forever"), ("u1", "sleep:0"), ("u2", "forever")]  # one at a time
BURST = [("b0", "forever"), ("b1", "sleep:0"), ("b2", "sleep:0")]  # accepted together


def _update_events(events: list[dict], event_type: str, update_id: str) -> list[dict]:
    return [
        e["event_data"]
        for e in events
        if e["event_type"] == event_type and e["event_data"]["update_id"] == update_id
    ]


def _kill_holding_local(dsn, workers, worker, eid: str) -> None:
    """Wait until ``worker`` runs a held local activity inside a workflow task, then SIGKILL it
    there; nothing of that task may reach the history.

    Only a ``forever`` run holds its task: a quick one (``sleep:0``) is also unfinished for a
    moment, and its task may commit before the kill lands."""
    wait_until(
        lambda: [
            r
            for r in _first_local_runs(dsn, eid)
            if r["finished_at"] is None and r["worker_pid"] == worker.pid and r["mode"] == "forever"
        ],
        10,
        "the handler's workflow task to hold its local activity",
    )
    before = history(dsn, eid)
    workers.kill(worker)
    # Other activities of the run (a burst's quick handlers) may record their results in the
    # meantime; the held task's own commit would write its WorkflowTaskCompleted and commands.
    after = history(dsn, eid)
    assert after[: len(before)] == before
    written = [e["event_type"] for e in after[len(before) :]]
    assert set(written) <= {"ActivityCompleted", "ActivityFailed"}, f"the killed task wrote: {written}"


def test_update_accepted_just_before_a_crash_is_applied_once(chaos_db, workers, client):
    worker = workers.start()
    handle = client.start_workflow(wf_updates)
    eid = handle.execution_id
    wait_until(
        lambda: count_events(history(chaos_db, eid), "WorkflowTaskCompleted"),
        10,
        "the first workflow task (it registers the handlers)",
    )
    args = {uid: {"tag": f"t{i}", "mode": mode} for i, (uid, mode) in enumerate(UPDATES + BURST)}
    outcomes = {}

    # One at a time: accepted, then the worker dies before the handler's task completes.
    for i, (update_id, mode) in enumerate(UPDATES):
        accepted = handle.update("bump", args[update_id], wait="accepted", update_id=update_id, timeout=20)
        assert accepted.update_id == update_id
        if mode == "forever":
            _kill_holding_local(chaos_db, workers, worker, eid)
            assert not _update_events(history(chaos_db, eid), "UpdateCompleted", update_id)
        else:
            workers.kill(worker)  # at once, wherever the handler's first task is
        assert len(_update_events(history(chaos_db, eid), "UpdateAccepted", update_id)) == 1
        worker = workers.start(wait=False)
        # Asked again while in flight: it attaches to the same update.
        again = handle.update("bump", args[update_id], update_id=update_id, timeout=30)
        outcomes[update_id] = accepted.result(timeout=30)
        assert again == outcomes[update_id] == {"n": i + 1, "receipt": f"t{i}:ok"}
        assert handle.query("n", timeout=10) == i + 1

    # A burst accepted together (handlers interleave in one run), then the worker dies.
    workers.wait_registered(worker)
    burst: dict[str, object] = {}

    def accept(update_id: str) -> None:
        burst[update_id] = handle.update(
            "bump", args[update_id], wait="accepted", update_id=update_id, timeout=20
        )

    threads = [threading.Thread(target=accept, args=(uid,), daemon=True) for uid, _ in BURST]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=25)
    assert sorted(burst) == sorted(uid for uid, _ in BURST), burst
    _kill_holding_local(chaos_db, workers, worker, eid)
    worker = workers.start(wait=False)
    for update_id, _ in BURST:
        outcomes[update_id] = burst[update_id].result(timeout=30)
        assert outcomes[update_id]["receipt"] == f"{args[update_id]['tag']}:ok"
    total = len(UPDATES) + len(BURST)
    assert sorted(outcomes[uid]["n"] for uid, _ in BURST) == list(range(len(UPDATES) + 1, total + 1))
    assert handle.query("n", timeout=10) == total

    # Asked again after it finished: the recorded outcome, nothing runs again.
    activity_runs = len(runs(chaos_db, eid))
    for update_id, arg in args.items():
        assert handle.update("bump", arg, update_id=update_id, timeout=10) == outcomes[update_id]
    assert handle.query("n", timeout=10) == total

    handle.signal("close")
    final = handle.result(timeout=20)
    assert final["n"] == total
    assert sorted(final["applied"]) == sorted(arg["tag"] for arg in args.values())
    assert final["applied"][: len(UPDATES)] == [f"t{i}" for i in range(len(UPDATES))]
    assert handle.update("bump", args["u0"], update_id="u0", timeout=10) == outcomes["u0"]
    assert handle.query("n", timeout=10) == total  # a replay of the finished run
    assert len(runs(chaos_db, eid)) == activity_runs, "a retried update ran something"

    events = history(chaos_db, eid)
    check_history(events)
    for update_id in args:
        assert len(_update_events(events, "UpdateAccepted", update_id)) == 1, update_id
        done = _update_events(events, "UpdateCompleted", update_id)
        assert len(done) == 1, (update_id, done)
        assert done[0]["result"] == outcomes[update_id] and done[0]["failure"] is None
    # Applied once: one activity scheduled per update, and its finished runs share one seq.
    scheduled = Counter(e["event_data"]["input"][0] for e in events if e["event_type"] == "ActivityScheduled")
    assert scheduled == Counter(arg["tag"] for arg in args.values())
    finished = query(
        chaos_db,
        "SELECT result, count(DISTINCT seq) AS seqs FROM chaos_runs "
        "WHERE execution_id = %s AND kind = 'activity' "
        "AND finished_at IS NOT NULL GROUP BY result ORDER BY result",
        (eid,),
    )
    assert [(r["result"], r["seqs"]) for r in finished] == sorted(
        (f"{arg['tag']}:ok", 1) for arg in args.values()
    )
    markers = [e["event_data"] for e in events if e["event_type"] == "MarkerRecorded"]
    assert len(markers) == total and {m["kind"] for m in markers} == {"local_activity"}


# ---------------------------------------------------------------------- 3. cancel vs. completion
RACES = 50


def test_cancel_racing_completion_ends_in_one_terminal_state(chaos_db, workers):
    for _ in range(2):
        workers.start(concurrency=8, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)

    rng = random.Random(2024)
    outcomes: dict[str, list] = {}
    threads = []
    with harvest.Client(chaos_db, pool_size=16) as client:

        def cancel(handle: harvest.WorkflowHandle, delays: list[float]) -> None:
            for delay in delays:
                time.sleep(delay)
                try:
                    outcome = handle.cancel("race")
                except WorkflowNotRunning:
                    outcome = "not running"
                except BaseException as exc:
                    outcome = exc
                outcomes[handle.execution_id].append(outcome)

        handles = {}
        for n in range(RACES):
            handle = client.start_workflow(wf_short, n, n % 3)  # 0, 1 or 2 activities
            handles[handle.execution_id] = (n, handle)
            outcomes[handle.execution_id] = []
            # Most cancels aim at the run's short life (tens of ms), some come late; every
            # fourth run gets a second cancel shortly after the first.
            first = rng.choice([0.0, rng.uniform(0, 0.03), rng.uniform(0, 0.08), rng.uniform(0.05, 0.3)])
            delays = [first] + ([rng.uniform(0, 0.05)] if n % 4 == 0 else [])
            thread = threading.Thread(target=cancel, args=(handle, delays), daemon=True)
            thread.start()
            threads.append(thread)
            time.sleep(rng.uniform(0, 0.02))
            if n == RACES // 2:  # one worker dies mid-race; its leases run out, the other goes on
                workers.kill(workers.procs[0])
                workers.start(concurrency=8, wait=False)
        for thread in threads:
            thread.join(timeout=20)

        wait_until(
            lambda: (
                query(chaos_db, "SELECT count(*) AS n FROM harvest.executions WHERE status = 'RUNNING'")[0][
                    "n"
                ]
                == 0
            ),
            30,
            "every run to end",
            interval=0.1,
        )
        statuses = {
            r["id"]: r["status"]
            for r in query(chaos_db, "SELECT id::text AS id, status FROM harvest.executions")
        }
        ended = Counter()
        for eid, (n, handle) in handles.items():
            calls = outcomes[eid]
            assert calls, f"run {n}: no cancel call returned"
            bad = [c for c in calls if not isinstance(c, bool) and c != "not running"]
            assert not bad, f"run {n}: cancel raised {bad!r}"
            events = history(chaos_db, eid)
            types = [e["event_type"] for e in events]
            ends = [t for t in types if t in TERMINAL_EVENTS]
            assert len(ends) == 1 and types[-1] == ends[0], f"run {n}: terminal events {types}"
            assert ends[0] in ("WorkflowCompleted", "WorkflowCancelled"), f"run {n}: {types}"
            check_history(events, completed=ends[0] == "WorkflowCompleted")
            requested = types.count("WorkflowCancelRequested")
            assert requested == calls.count(True) <= 1, f"run {n}: {calls} vs {types}"
            if False in calls:
                assert True in calls, f"run {n}: a cancel said 'already requested' first: {calls}"
            if ends[0] == "WorkflowCancelled":
                assert statuses[eid] == "CANCELLED", (n, statuses[eid], types)
                assert requested == 1 and types.index("WorkflowCancelRequested") < len(types) - 1
                with pytest.raises(WorkflowCancelled):
                    handle.result(timeout=5)
            else:
                assert statuses[eid] == "COMPLETED", (n, statuses[eid], types)
                assert handle.result(timeout=5) == f"done{n}"
            ended[ends[0]] += 1
            ended["not running"] += "not running" in calls
        assert query(chaos_db, "SELECT count(*) AS n FROM harvest.tasks")[0]["n"] == 0
    # The race really was a race: both ends happened, and some cancels came too late.
    assert ended["WorkflowCompleted"] >= 1 and ended["WorkflowCancelled"] >= 1, ended
    assert ended["not running"] >= 1, ended


# ---------------------------------------------------------------------- 4. everything at once
ENTITY_SENDERS = 3
ENTITY_PER_SENDER = 25


def test_an_entity_under_signals_updates_pauses_and_kills_keeps_every_promise(chaos_db, workers):
    """Several client connections signal, update, pause and resume one entity (by workflow_id)
    while it continues as new every few signals and its workers are SIGKILLed: every signal is
    seen once, in each sender's order; every update is applied once; every run's history keeps
    the invariants."""
    for _ in range(2):
        workers.start(concurrency=4, workflow_lease=1.5, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)
    total = ENTITY_SENDERS * ENTITY_PER_SENDER
    wid = "entity-1"
    with harvest.Client(chaos_db) as starter:
        starter.start_workflow(wf_entity, total, [], [], options=harvest.StartOptions(workflow_id=wid))
    errors: list[BaseException] = []
    done = threading.Event()
    completed_updates: list[str] = []

    def sender(k: int) -> None:
        try:
            with harvest.Client(chaos_db) as c:
                h = c.get_handle(workflow=wf_entity, workflow_id=wid)
                for i in range(ENTITY_PER_SENDER):
                    while True:
                        try:
                            h.signal("item", k * 1000 + i)
                            break
                        except WorkflowNotRunning:  # rotated under a stale handle
                            h = c.get_handle(workflow=wf_entity, workflow_id=wid)
                    time.sleep(random.uniform(0.05, 0.35))
        except BaseException as exc:
            errors.append(exc)

    def pauser() -> None:
        rng = random.Random(7)
        try:
            with harvest.Client(chaos_db) as c:
                while not done.is_set():
                    h = c.get_handle(workflow=wf_entity, workflow_id=wid)
                    try:
                        h.pause("chaos")
                        time.sleep(rng.uniform(0.05, 0.3))
                        h.resume("chaos")
                    except WorkflowNotRunning:
                        pass
                    time.sleep(rng.uniform(0.05, 0.4))
                h = c.get_handle(workflow=wf_entity, workflow_id=wid)
                try:
                    h.resume("end")
                except WorkflowNotRunning:
                    pass
        except BaseException as exc:
            errors.append(exc)

    def updater() -> None:
        n = 0
        try:
            with harvest.Client(chaos_db) as c:
                while not done.is_set():
                    tag = f"t{n}"
                    for _ in range(50):
                        if done.is_set():
                            break
                        h = c.get_handle(workflow=wf_entity, workflow_id=wid)
                        try:
                            assert h.update("bump", tag, update_id=tag, timeout=10) == tag
                            completed_updates.append(tag)
                            break
                        except (
                            WorkflowNotRunning,
                            harvest.QueryTimeout,
                            harvest.UpdateRejected,
                            harvest.UpdateFailed,
                        ):
                            time.sleep(0.1)
                    n += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sender, args=(k,), daemon=True) for k in range(ENTITY_SENDERS)]
    threads += [threading.Thread(target=pauser, daemon=True), threading.Thread(target=updater, daemon=True)]
    for t in threads:
        t.start()
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "99")))
    deadline = time.monotonic() + 40
    kills = ended = 0
    while any(t.is_alive() for t in threads[:ENTITY_SENDERS]):
        assert time.monotonic() < deadline, "stuck sending"
        time.sleep(rng.uniform(0.3, 0.9))
        if kills % 2:
            # The database ends a worker's session while it reports (a decision, results, a claim).
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                ended += query(
                    chaos_db,
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n "
                    "FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND query ~ '(complete_workflow_task|complete_activities|claim_tasks|accept_update)' "
                    "AND state <> 'idle'",
                )[0]["n"]
                time.sleep(0.01)
        else:
            workers.kill(rng.choice(workers.alive()))
            workers.start(concurrency=4, workflow_lease=1.5, wait=False)
        kills += 1
    with harvest.Client(chaos_db) as c:
        h = c.get_handle(workflow=wf_entity, workflow_id=wid)
        try:
            result = h.result(timeout=40)
        finally:
            done.set()
            for t in threads:
                t.join(timeout=30)
    assert not errors, errors
    seen = result["seen"]
    assert len(seen) == total and sorted(seen) == sorted(
        k * 1000 + i for k in range(ENTITY_SENDERS) for i in range(ENTITY_PER_SENDER)
    ), seen
    for k in range(ENTITY_SENDERS):
        mine = [v for v in seen if v // 1000 == k]
        assert mine == sorted(mine), f"sender {k} out of order: {mine}"
    applied = result["applied"]
    assert len(applied) == len(set(applied)), f"an update applied twice: {applied}"
    assert set(completed_updates) <= set(applied)
    chain = query(chaos_db, "SELECT id, status FROM harvest.executions WHERE workflow_id = %s", (wid,))
    assert kills >= 3
    for row in chain:
        events = history(chaos_db, str(row["id"]))
        check_history(events, completed=row["status"] == "COMPLETED")
        for uid, n in Counter(
            e["event_data"]["update_id"] for e in events if e["event_type"] == "UpdateAccepted"
        ).items():
            assert n == 1, (uid, n)
    assert len(chain) > 2 and completed_updates, (len(chain), completed_updates)


# ---------------------------------------------------------------------- 5. resets racing signals
RESET_SIGNALS = 60


def test_resets_racing_signals_keep_each_signal_once_in_order(chaos_db, workers):
    """Resets (signal_reapply="buffer") to the run's last workflow task, one after another,
    while a client streams signals by workflow_id and a worker dies: the last fork reads every
    signal the senders were told was taken, once, in send order."""
    for _ in range(2):
        workers.start(concurrency=4, workflow_lease=1.5, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)
    wid = "collect-1"
    with harvest.Client(chaos_db) as c:
        c.start_workflow(wf_collect, RESET_SIGNALS, options=harvest.StartOptions(workflow_id=wid))
    errors: list[BaseException] = []

    def sender() -> None:
        try:
            with harvest.Client(chaos_db) as c:
                for i in range(RESET_SIGNALS):
                    while True:
                        try:
                            c.get_handle(workflow=wf_collect, workflow_id=wid).signal("item", i)
                            break
                        except WorkflowNotRunning:  # reset under it: the fork takes the next try
                            time.sleep(0.01)
                    time.sleep(random.uniform(0.0, 0.05))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    resets = 0
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "5")))
    deadline = time.monotonic() + 45
    with harvest.Client(chaos_db) as c:
        while thread.is_alive():
            assert time.monotonic() < deadline, "stuck"
            time.sleep(rng.uniform(0.05, 0.3))
            run = query(
                chaos_db,
                "SELECT id FROM harvest.executions WHERE workflow_id = %s AND status = 'RUNNING'",
                (wid,),
            )
            if not run:
                continue
            eid = str(run[0]["id"])
            marks = [
                e["event_id"] for e in history(chaos_db, eid) if e["event_type"] == "WorkflowTaskCompleted"
            ]
            if not marks:
                continue
            try:
                c.get_handle(eid).reset(marks[-1], "chaos", signal_reapply="buffer")
                resets += 1
            except (WorkflowNotRunning, InvalidArgument):  # (a run that ended or moved on meanwhile)
                pass
            if resets % 5 == 4:
                workers.kill(rng.choice(workers.alive()))
                workers.start(concurrency=4, workflow_lease=1.5, wait=False)
        thread.join(timeout=10)
        assert not errors, errors
        result = c.get_handle(workflow=wf_collect, workflow_id=wid).result(timeout=30)
    assert result == list(range(RESET_SIGNALS)), result
    assert resets >= 3, resets
