"""The pod runner: development tooling that runs specd's own pods as local processes.

Never part of the chart or an image (production clusters have kubelets). Modules, one job
each: ``rules`` (which pods, and how a container becomes a local argv/env), ``volumes``
(ConfigMap/Secret/projected volumes with the kubelet's atomic ``..data`` swap),
``status`` (the pod status the kubelet would write), ``pod_worker`` (one pod's process:
start, probes, restarts, termination), ``proxy`` (HAProxy in front of each Service's Ready
endpoints), ``discovery`` (Prometheus file_sd with kubernetes_sd's labels), ``runner``
(the loop), ``state`` (what ``specd cluster status/url/logs`` read).
"""
