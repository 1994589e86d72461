"""`gpu` tests: collected by `pytest -m gpu`, skipped with the reason where CUDA is absent."""

from __future__ import annotations

import sys
from pathlib import Path

# The vLLM test reuses the CPU fidelity helpers of tests/integration.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
