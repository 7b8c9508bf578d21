"""Recording the operator's decisions without ever holding a rollout up.

A tick's rows are written right after its status write; when the store fails (or failed in
the last half minute) they go to a bounded queue that one writer thread drains, each write
retried with back-off and, if the store stays slow or down, logged and counted
(``specd_operator_store_write_errors_total``) and dropped -- the rollout itself lives in
``.status``, the store is its history (at most once: a crash between the status write and
the store write loses that tick's rows, never duplicates them). What one
rollout tick writes is derived from the tick alone (its events, its measurements, the state
before and after), and a tick's transitions are computed once (its decision is written to
``.status`` before anything else), so a restarted operator writes no row twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from specd.operator import metrics
from specd.operator.history.store import HistoryStore
from specd.operator.rollout.canary import Plan
from specd.operator.rollout.controls import ACTOR_ANNOTATION
from specd.operator.rollout.state import RolloutState

log = logging.getLogger(__name__)
Write = Callable[[HistoryStore], None]
# events that a person's control caused (the actor is the one the patch recorded)
CONTROL_EVENTS = {"StepPromoted", "Promoted", "Resumed", "RolloutRetried"}
BREAKER_S = 30.0
OUTCOMES = {"RolloutCompleted": "Promoted", "RolledBack": "RolledBack",
            "RolloutCleared": "Cleared"}


class Recorder:
    def __init__(self, store: HistoryStore, retries: int = 3, backoff_s: float = 0.5,
                 capacity: int = 10_000) -> None:
        self.store, self.retries, self.backoff_s = store, retries, backoff_s
        self.failed_at = -BREAKER_S
        self.queue: queue.Queue[tuple[str, Write] | None] = queue.Queue(capacity)
        self.thread = threading.Thread(target=self._drain, name="history-writer", daemon=True)
        self.thread.start()

    def write(self, what: str, write: Write) -> None:
        """Write now (right after the tick's status write, so a crash loses as little as
        possible); if the store fails, or failed in the last half minute, queue it for the
        writer thread instead, so a slow or dead store never holds ticks up."""
        if time.monotonic() - self.failed_at > BREAKER_S:
            try:
                write(self.store)
                return
            except Exception as exc:  # noqa: BLE001 - retried below
                self.failed_at = time.monotonic()
                log.warning("history store: %s failed (%s); retrying in the background",
                            what, exc)
        self.submit(what, write)

    def submit(self, what: str, write: Write) -> None:
        try:
            self.queue.put_nowait((what, write))
        except queue.Full:
            metrics.STORE_WRITE_ERRORS.labels(kind="queue_full").inc()
            log.warning("history store: queue full, dropped %s", what)

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything submitted so far is written (tests, shutdown)."""
        done = threading.Event()
        self.submit("flush", lambda _: done.set())
        done.wait(timeout)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(timeout=10)
        self.store.close()

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            what, write = item
            for attempt in range(self.retries + 1):
                try:
                    write(self.store)
                    break
                except Exception as exc:  # noqa: BLE001 - the store must never stop a rollout
                    if attempt == self.retries:
                        metrics.STORE_WRITE_ERRORS.labels(kind="write").inc()
                        log.warning("history store: %s not written after %d tries: %s", what,
                                    attempt + 1, exc)
                    else:
                        time.sleep(self.backoff_s * 2 ** attempt)


def _by_a_user(event: Any) -> bool:
    """A person's control caused it: promote, resume, retry, and the rollback of an abort
    (the operator's own rollbacks read "AnalysisFailed: ...", "InconclusiveAnalysis: ...")."""
    return event.reason in CONTROL_EVENTS or (
        event.reason == "RolledBack" and event.message.startswith("Aborted:"))


def _when(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def tick_writes(owner: dict[str, Any], before: RolloutState, plan: Plan,
                results: Sequence[Any], window: str, now: float) -> list[tuple[str, Write]]:
    """What one rollout tick records: its rollout row(s), events, measurements, outcome."""
    meta = owner["metadata"]
    namespace, service, uid = meta["namespace"], meta["name"], meta["uid"]
    actor = (meta.get("annotations") or {}).get(ACTOR_ANNOTATION)
    after = plan.state
    at = _when(now)
    assert at is not None
    writes: list[tuple[str, Write]] = []

    def rollout_of(state: RolloutState) -> Callable[[HistoryStore], int] | None:
        if state.canary is None or state.started_at is None or state.stable is None:
            return None
        # whole seconds: .status keeps RFC 3339 times to the second, and the key must be the
        # same whether this tick planned from memory or from the status read back
        started = _when(float(int(state.started_at)))

        def key(store: HistoryStore) -> int:
            return store.rollout(namespace=namespace, service=service, uid=uid,
                                 stable=str(state.stable), canary=str(state.canary),
                                 started_at=started)  # type: ignore[arg-type]
        return key

    current, previous = rollout_of(after), rollout_of(before)
    for event in plan.events:
        target = previous if event.reason in OUTCOMES and previous else current or previous
        if event.reason == "RolloutRestarted" and previous is not None:
            def superseded(store: HistoryStore, previous: Any = previous) -> None:
                # a rollout already rolled back (aborted) keeps its outcome
                store.finish(previous(store), at=at, outcome="Superseded",
                             message="a newer revision was rolled out", if_open=True)
            writes.append(("superseded rollout", superseded))
        if target is None:
            continue

        def record(store: HistoryStore, target: Any = target, event: Any = event) -> None:
            rollout_id = target(store)
            store.event(rollout_id, at=at, step=plan.state.step if event.reason not in
                        OUTCOMES else before.step, weight=plan.weight, action=event.reason,
                        actor=actor if _by_a_user(event) else "specd-operator",
                        reason=event.message)
            if event.reason in OUTCOMES:
                store.finish(rollout_id, at=at, outcome=OUTCOMES[event.reason],
                             message=event.message)
            elif event.reason == "RolloutRetried":
                store.finish(rollout_id, at=None, outcome=None)
        writes.append((f"event {event.reason} of {namespace}/{service}", record))
    if results and current is not None:
        def measured(store: HistoryStore, target: Any = current) -> None:
            rollout_id = target(store)
            for r in results:
                store.measurement(rollout_id, at=at, step=before.step, name=r.name,
                                  metric=r.metric, task_group=r.task_group, window=window,
                                  verdict=r.verdict, canary=r.canary, stable=r.stable,
                                  value=r.value, query=r.query, message=r.message)
        writes.append((f"{len(results)} measurements of {namespace}/{service}", measured))
    return writes
