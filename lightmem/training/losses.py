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


def per_positive_softmax(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over positives of -log softmax of that positive against the group's negatives.

    ``listwise_softmax`` is satisfied once any one positive tops the group; here every positive
    must beat the negatives, which is what recall_all (every evidence turn retrieved) asks.
    """
    logits = logits.float()
    neg = ~labels.bool() & mask
    pos = labels.bool() & mask & neg.any(dim=1, keepdim=True)  # a group without negatives has nothing to beat
    if not pos.any():
        return logits.new_zeros(())
    neg_lse = torch.logsumexp(logits.masked_fill(~neg, float("-inf")), dim=1, keepdim=True)  # [G, 1]
    per = torch.logaddexp(logits, neg_lse) - logits  # -log(e^s / (e^s + Σ_neg e^n)) for each candidate
    return per[pos].mean()


def _both(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, listwise_weight: float) -> torch.Tensor:
    return pointwise_bce(logits, labels, mask) + listwise_weight * listwise_softmax(logits, labels, mask)


def _both_per_positive(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, listwise_weight: float) -> torch.Tensor:
    return pointwise_bce(logits, labels, mask) + listwise_weight * per_positive_softmax(logits, labels, mask)


# The ranking losses by the name a config gives (``task.loss``, ``loss``): each takes (logits, labels, mask,
# listwise_weight); the weight scales the listwise term of the two sums and is unused by the others.
RANKING_LOSSES = {
    "pointwise": lambda logits, labels, mask, _: pointwise_bce(logits, labels, mask),  # BCE per candidate
    "listwise": lambda logits, labels, mask, _: listwise_softmax(logits, labels, mask),  # softmax over the group
    "both": _both,  # BCE + weighted listwise
    "per_positive": lambda logits, labels, mask, _: per_positive_softmax(logits, labels, mask),  # each positive vs the negatives
    "both_per_positive": _both_per_positive,  # BCE + weighted per-positive
}


def ranking_loss(name: str, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, listwise_weight: float = 1.0) -> torch.Tensor:
    """The ranking loss ``name`` (one of ``RANKING_LOSSES``) of a batch of groups."""
    if name not in RANKING_LOSSES:
        raise ValueError(f"unknown ranking loss {name!r}: use {', '.join(RANKING_LOSSES)}")
    return RANKING_LOSSES[name](logits, labels, mask, listwise_weight)
