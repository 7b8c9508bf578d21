"""``specd pilot``: judge speculative decoding as a conditional service optimisation.

Three groups (G0 the current plain service, G1 one frozen speculative strategy, G2 the
equal-resource plain alternative), each a real OpenAI-compatible server; a capacity sweep
per group; flat / peak / burst traces set relative to G0's capacity, identical for every
group; per-request timings and per-10-second-window round accounting from ``/metrics``;
business regression checks; a verdict per task group. Module map:

- ``config``     the pilot file (pydantic, extra=forbid) and its static checks
- ``prompts``    the real prompt sets per task group (the engine benchmark's prompts)
- ``traces``     seeded arrival schedules: Poisson, gamma, on/off, trace-file replay
- ``load``       the open-loop load generator (httpx, streaming, per-request timing)
- ``promtext``   Prometheus text parsing and the per-window round accounting
- ``servers``    ``specd serve`` processes on loopback, or existing endpoints; RSS
- ``regression`` greedy consistency (with the probe's near-tie test), stop, stream, cancel
- ``stats``      percentiles, t confidence intervals, paired differences
- ``verdict``    the decision rule and the worked cost examples
- ``runner``     ``specd pilot run``: preflight, regression, capacity, traces, repeats
- ``report``     ``specd pilot report``: Markdown + JSON + PNG plots
- ``history``    ``specd pilot record``: the verdicts into the history store
"""
