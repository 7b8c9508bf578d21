"""specd's development tooling (never shipped): ``specd_dev.cluster`` (the local control plane
and pod runner behind ``specd cluster``), ``specd_dev.testing`` (test helpers: an operator in a
subprocess, services, traffic), ``specd_dev.fake_worker`` (a model-free worker for the pilot's
tests) and ``specd_dev.bench`` (benches that need the local cluster)."""
