"""``python -m specd.cluster.runner``: the pod runner (started by ``specd cluster up``)."""

import sys

from specd.cluster.runner.runner import main

sys.exit(main())
