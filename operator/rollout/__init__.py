"""Canary rollouts, one file per concern (as Argo Rollouts keeps ``rollout/canary.go``,
``pause.go``, ...), all pure:

- ``split``: replicas per track at a canary weight;
- ``state``: the rollout's bookkeeping, read from and written to ``.status`` (never only in
  memory, so a restarted operator resumes mid-rollout);
- ``canary``: the state machine -- spec + state + observed tracks + the latest analysis
  verdict + now -> desired tracks, the new state, events;
- ``controls``: the six human actions (promote, promote full, pause, resume, abort, retry),
  each one merge patch on ``spec.rollout``, shared by ``kubectl specd``, the dashboard and
  the tests.
"""
