"""Hot-reload of the verification policy file.

Kubernetes updates a mounted ConfigMap by writing a new timestamped directory and swapping
the ``..data`` symlink atomically, so the file's inode and mtime may not change the way an
in-place edit would, and inotify on the file itself misses it. The watcher therefore polls:
it reads the path (following symlinks to whatever they point at now) and compares a content
hash. A changed document is validated with ``specd.api.policy.parse_policy``; a valid one is
handed to ``apply`` (the engine swaps it in between rounds), an invalid one is refused: the
old policy stays, the reload-error counter rises and the log says why — once per bad content,
not once per poll.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from specd.api.policy import Policy, parse_policy

log = logging.getLogger("specd.worker.server.policy")


@dataclass(frozen=True)
class Decision:
    """What to do with the file's current content."""

    action: str  # "unchanged" | "apply" | "refuse"
    digest: str
    policy: Policy | None = None
    reason: str = ""


def content_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def decide(text: str, last_digest: str | None) -> Decision:
    """Pure decision: unchanged content is ignored, new content is parsed and judged."""
    digest = content_digest(text)
    if digest == last_digest:
        return Decision("unchanged", digest)
    try:
        policy = parse_policy(text)
    except ValidationError as exc:
        reason = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}"
                           for e in exc.errors()[:5])
        return Decision("refuse", digest, reason=reason or str(exc))
    except ValueError as exc:
        return Decision("refuse", digest, reason=str(exc))
    return Decision("apply", digest, policy=policy)


def read_policy_file(path: str | Path) -> Policy:
    """Read and validate the policy at start-up (a bad file is a start-up error)."""
    from specd import SpecdError

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecdError(f"cannot read policy file {path}: {exc.strerror or exc}") from exc
    decision = decide(text, None)
    if decision.policy is None:
        raise SpecdError(f"invalid policy file {path}: {decision.reason}")
    return decision.policy


class PolicyWatcher:
    """Polls ``path`` every ``interval`` seconds; calls ``apply(policy)`` on a valid change."""

    def __init__(self, path: str | Path, apply: Callable[[Policy], None],
                 on_refuse: Callable[[str], None], interval: float = 1.0,
                 initial_text: str | None = None) -> None:
        self.path = Path(path)
        self.apply = apply
        self.on_refuse = on_refuse
        self.interval = interval
        self.last_digest: str | None = content_digest(initial_text) if initial_text else None
        self.reloads = 0
        self.refusals = 0
        self._task: asyncio.Task[None] | None = None

    def check_once(self) -> Decision | None:
        """One poll: read, decide, act. Returns the decision (None if unreadable)."""
        try:
            text = self.path.read_text()
        except OSError as exc:
            # a missing file mid-swap or a deleted mount: keep the old policy, say so once
            reason = f"cannot read {self.path}: {exc.strerror or exc}"
            marker = content_digest("\0unreadable:" + reason)
            if marker != self.last_digest:
                self.last_digest = marker
                self._refuse(reason)
            return None
        decision = decide(text, self.last_digest)
        if decision.action == "unchanged":
            return decision
        self.last_digest = decision.digest
        if decision.action == "refuse":
            self._refuse(decision.reason)
            return decision
        assert decision.policy is not None
        try:
            self.apply(decision.policy)
        except Exception as exc:  # the engine refused it (e.g. mode needs a drafter it lacks)
            self._refuse(f"engine refused the policy: {exc}")
            return Decision("refuse", decision.digest, reason=str(exc))
        self.reloads += 1
        log.info("policy reloaded from %s: version %s mode %s", self.path,
                 decision.policy.version(), decision.policy.mode)
        return decision

    def _refuse(self, reason: str) -> None:
        self.refusals += 1
        log.error("policy reload refused, keeping the current policy: %s", reason)
        self.on_refuse(reason)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check_once()
            except Exception:  # never let the watcher die silently
                log.exception("policy watcher poll failed")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="policy-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
