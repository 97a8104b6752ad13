"""LoRA as one optional object: a spec builds a peft wrapper, ``None`` trains the whole model."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LoraSpec:
    """peft LoRA settings. ``modules_to_save`` are trained in full and saved with the adapter (heads)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.1
    target_modules: list[str] = field(default_factory=lambda: ["query", "key", "value"])
    modules_to_save: list[str] = field(default_factory=list)


def apply_lora(model: torch.nn.Module, spec: LoraSpec | None, task_type: str) -> torch.nn.Module:
    """Wrap ``model`` with a LoRA adapter (base weights frozen), or return it unchanged for full fine-tuning.

    Args:
        task_type: peft task type: ``SEQ_CLS``, ``TOKEN_CLS`` or ``CAUSAL_LM``.
    """
    if spec is None:
        return model
    from peft import LoraConfig, TaskType, get_peft_model

    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=list(spec.target_modules),
                     modules_to_save=list(spec.modules_to_save) or None, task_type=TaskType[task_type])
    return get_peft_model(model, cfg)


def trainable_summary(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts: how many train and how many there are."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable": trainable, "total": total}
