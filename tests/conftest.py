"""Shared test setup: keep W&B offline and out of the home directory; one Ray-free default."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
