"""Hands a round's statistics (``round_stats.RoundStats``) to the Prometheus metrics: the one
place that knows which series a round's numbers go to. Label children are bound once per
policy (a policy change re-labels every series: drafter, mode and version are labels)."""

from __future__ import annotations

from specd.api import metrics as mnames
from specd.api.policy import Policy
from specd.worker.engine.draft_gate import bucket
from specd.worker.engine.metrics import EngineMetrics
from specd.worker.engine.round_stats import RoundStats


class RoundExporter:
    def __init__(self, metrics: EngineMetrics, drafter: str, policy: Policy) -> None:
        self.metrics = metrics
        self.drafter = drafter
        self.phase_seconds = {p: 0.0 for p in mnames.PHASES}  # totals since start
        self.set_policy(policy)

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy
        self._groups: dict[str, tuple[str, str, str, str]] = {}
        self._labels = labels = (self.drafter, policy.mode, policy.version())
        m = self.metrics
        m.policy_info.clear()
        m.policy_info.labels(policy.mode, labels[2], self.drafter).set(1)
        self._phase = {p: m.phase.labels(*labels, p) for p in mnames.PHASES}
        self._rounds = m.rounds.labels(*labels)
        self._verify_length = m.verify_length.labels(*labels)
        self._verified_requests = m.verified_requests.labels(*labels)

    def group_labels(self, group: str) -> tuple[str, str, str, str]:
        """(drafter, the group's own mode, policy version, group): per-group series."""
        labels = self._groups.get(group)
        if labels is None:
            labels = self._groups[group] = (self._labels[0], self.policy.for_group(group).mode,
                                            self._labels[2], group)
        return labels

    def export(self, stats: RoundStats) -> None:
        m = self.metrics
        for name, sec in stats.phases.items():
            self._phase[name].observe(sec)
            self.phase_seconds[name] += sec
        self._rounds.inc()
        if stats.verified_requests:
            self._verified_requests.inc(stats.verified_requests)
        for r in stats.requests:
            self._verify_length.observe(r.verified)
            if r.counted:
                m.acceptance_length.labels(*self.group_labels(r.group)).observe(r.accepted + 1)
        seconds, batch = stats.seconds, str(bucket(stats.rows))
        for group, c in stats.groups.items():
            lab = self.group_labels(group)
            kind_labels = (group, lab[1], stats.kind, batch)
            if not stats.prefill_tokens:
                # decode work alone: a round that also prefills a newcomer's chunk charges
                # that chunk to the decoding rows, more per token to a plain round (fewer
                # tokens) than to a speculative one, so the reference read plain slow
                m.decode_seconds.labels(*kind_labels).inc(seconds * c.rows)
                m.decode_tokens.labels(*kind_labels).inc(c.emitted)
            if c.drafted:
                m.drafted.labels(*lab).inc(c.drafted)
                m.truncated.labels(*lab).inc(c.drafted - c.verified)
            if c.verified:
                m.verified.labels(*lab).inc(c.verified)
            if c.accepted:
                m.accepted.labels(*lab).inc(c.accepted)
            m.emitted.labels(*lab).inc(c.emitted)
        for group, pos in stats.positions.items():
            lab = self.group_labels(group)
            for i, n in enumerate(pos.verified):
                position = str(i + 1)
                m.verified_pos.labels(*lab, position).inc(n)
                if pos.reached[i]:
                    m.reached_pos.labels(*lab, position).inc(pos.reached[i])
                    m.predicted_pos.labels(*lab, position).inc(pos.predicted[i])
                if pos.accepted[i]:
                    m.accepted_pos.labels(*lab, position).inc(pos.accepted[i])
