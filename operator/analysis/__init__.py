"""Canary analysis, one file per concern (Argo Rollouts' metric-provider shape):

- ``promql``: every built-in metric's PromQL for one track (and task group), built in one
  place from the recipes in ``specd.api.metrics``;
- ``judge``: pure: values + thresholds + sample counts -> Successful / Failed / Inconclusive;
- ``provider``: the provider interface and the Prometheus provider (prometheus-api-client);
  an unreachable server or a refused query is an Error, with Prometheus's message;
- ``run``: one analysis run over every metric (and task group) -> one Measurement for the
  state machine, plus the per-metric results for the status and the history.
"""
