"""The specd operator (kopf): reconciles SpeculativeService objects. Never imports torch."""
