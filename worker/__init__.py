"""The specd worker: model loading, drafters, scheduler, verifier, engine, server."""
