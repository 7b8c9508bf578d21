"""The policy tuner (issue 21), one file per concern: ``decide`` is the pure decision for one
(service, task group) from one Prometheus window; the timer loop, the signals it reads and the
policy overlay it writes come next."""
