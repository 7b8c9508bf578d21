"""The policy tuner (issue 21), one file per concern: ``decide`` is the pure decision for one
(service, task group) from one window; ``signals`` reads those windows from Prometheus (the
worker's per-group counters and its true-plain reference rounds); ``loop`` is one interval of
one service, pure (windows -> status.tuning, changes); ``overlay`` is what the reconciler
renders into the policy on top of the spec; ``timer`` is the I/O edge a kopf timer calls."""
