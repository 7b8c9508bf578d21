"""The worker's OpenAI-compatible HTTP server (``specd serve``) in front of the engine."""
