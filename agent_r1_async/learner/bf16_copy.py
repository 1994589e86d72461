"""A bf16 working copy of the policy for forward and backward; the fp32 module stays the master.

Under plain bf16 autocast every linear layer casts its fp32 weight to bf16 on every call: once
per micro-batch in forward, again when activation checkpointing recomputes the layer in
backward, and the cast weights are held until the backward that uses them. On a CPU that
costs about a tenth of an update (torch.profiler of the default config's update: the casts
are 11 % of it). Here the weights are cast once per optimizer step instead:

- `module`: a deep copy of the master whose floating parameters are bf16 (buffers keep their
  dtype: the rotary frequencies stay fp32). Forward and backward run on it, still under
  autocast, which now finds bf16 weights and casts only activations.
- Each copied parameter's gradient is added into its master's fp32 `.grad` as soon as
  backward has accumulated it (`register_post_accumulate_grad_hook`) and freed there, so the
  master's gradients accumulate over micro-batches in fp32 exactly as under autocast (where
  the bf16 gradient of the cast is likewise cast back and accumulated in fp32), and at most
  one parameter's bf16 gradient exists at a time.
- Clipping, AdamW and checkpoints see only the master (fp32 weights and optimizer state, as
  before). `refresh` copies the master into the working copy wherever a master parameter
  changed in place since the last copy (torch's per-tensor version counter: an optimizer
  step, a checkpoint restore), so no caller has to remember to.

The numerics differ from autocast in one place: the working copy's residual stream and norm
weights are bf16, as in a bf16 inference engine (the engines run the whole model in bf16), so
the learner's log-probs move towards the engine's; `mismatch/*` metrics measure the gap.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn


class Bf16Copy:
    """`module`: bf16 working copy of `master`; gradients flow back into `master`'s fp32 `.grad`."""

    def __init__(self, master: nn.Module) -> None:
        self.module = copy.deepcopy(master)
        self._pairs: list[tuple[nn.Parameter, nn.Parameter]] = []  # (master, working)
        masters = dict(master.named_parameters())  # tied parameters once, same names in both
        for name, work in self.module.named_parameters():
            main = masters[name]
            if work.is_floating_point():
                work.data = work.data.to(torch.bfloat16)
            if main.requires_grad:
                work.register_post_accumulate_grad_hook(_into_master(main))
            self._pairs.append((main, work))
        self._seen = [main._version for main, _ in self._pairs]

    def refresh(self) -> int:
        """Copy each master parameter changed since the last copy into the working copy;
        returns how many were copied."""
        copied = 0
        with torch.no_grad():
            for i, (main, work) in enumerate(self._pairs):
                if main._version != self._seen[i]:
                    work.copy_(main)
                    self._seen[i] = main._version
                    copied += 1
        return copied

    def nbytes(self) -> int:
        """Bytes the working copy's parameters hold."""
        return sum(w.numel() * w.element_size() for _, w in self._pairs)


def _into_master(main: nn.Parameter) -> Callable[[torch.Tensor], None]:
    def hook(work: torch.Tensor) -> None:
        grad = work.grad
        if grad is None:
            return
        if main.grad is None:
            main.grad = grad.to(main.dtype)
        else:
            main.grad.add_(grad)
        work.grad = None

    return hook
