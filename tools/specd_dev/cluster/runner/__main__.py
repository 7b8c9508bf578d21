"""``python -m specd_dev.cluster.runner``: the pod runner (started by ``specd cluster up``)."""

import sys

from specd_dev.cluster.runner.runner import main

sys.exit(main())
