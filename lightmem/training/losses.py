"""Training losses: pure functions of logits and labels."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def pointwise_bce(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Binary cross-entropy of each (query, candidate) logit against its 0/1 label."""
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
    if mask is None:
        return loss.mean()
    mask = mask.float()
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def listwise_softmax(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """-log of the softmax mass on the positives of each group (rows of ``[G, N]``).

    ``mask`` marks real candidates (groups are padded to N). Groups without a positive
    carry no listwise signal and are left out.
    """
    logits = logits.float().masked_fill(~mask, float("-inf"))
    pos = logits.masked_fill(~(labels.bool() & mask), float("-inf"))
    has_pos = (labels.bool() & mask).any(dim=1)
    if not has_pos.any():
        return logits.new_zeros(())
    per_group = torch.logsumexp(logits, dim=1) - torch.logsumexp(pos, dim=1)
    return per_group[has_pos].mean()


def ranking_loss(name: str, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, listwise_weight: float = 1.0) -> torch.Tensor:
    """``pointwise`` (BCE), ``listwise`` (softmax over the group) or ``both`` (their sum, listwise weighted)."""
    if name == "pointwise":
        return pointwise_bce(logits, labels, mask)
    if name == "listwise":
        return listwise_softmax(logits, labels, mask)
    if name == "both":
        return pointwise_bce(logits, labels, mask) + listwise_weight * listwise_softmax(logits, labels, mask)
    raise ValueError(f"unknown ranking loss {name!r}: use pointwise, listwise or both")
