"""specd: speculative-decoding LLM serving on Kubernetes.

Import names: ``specd.api`` (contracts), ``specd.worker`` (engine and server),
``specd.operator`` (kopf operator), ``specd.dashboard`` (Streamlit app). The CLI lives in
``specd.cli``. The local test cluster and the test helpers are development tooling outside
this package (``tools/``, import name ``specd_dev``).
"""

__version__ = "0.1.0"


class SpecdError(Exception):
    """An error with a message meant for a person: the CLI prints it as one line."""
