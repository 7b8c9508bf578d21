"""The local Kubernetes control plane and Prometheus used by tests and the demo."""
