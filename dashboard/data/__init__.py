"""The dashboard's data access: plain functions over the Kubernetes API's objects, Prometheus
and the history store, without Streamlit (the pages call them; the tests call them too)."""
