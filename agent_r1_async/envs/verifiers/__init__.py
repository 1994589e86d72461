"""verifiers v1 environments, served by verifiers' EnvServer from a venv of their own (env.py)."""
