"""Load a trained checkpoint: a peft adapter (+ heads) on a packaged base, or a full model folder."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def load_adapted(auto_class: Any, checkpoint: str | Path, base_model: str, what: str, **model_kwargs: Any):
    """``(model, tokenizer)`` with the adapter merged into the base weights (no peft overhead at inference).

    Args:
        auto_class: e.g. ``AutoModelForSequenceClassification``.
        checkpoint: Folder with ``adapter_config.json`` (LoRA) or a full ``config.json`` model.
        base_model: Packaged base the adapter was trained on (resolved offline by the registry).
        what: Names the model in the error raised when the folder is missing.
    """
    from transformers import AutoTokenizer

    from lightmem.models.first_run import quiet_model_load
    from lightmem.models.registry import ModelRegistry

    ckpt = Path(checkpoint)
    if not ckpt.exists():
        raise FileNotFoundError(f"no trained {what} at {ckpt}; train one with `make train` (`make train-experimental` for the "
                                "models the default pipeline does not use) or point the config elsewhere")
    if (ckpt / "adapter_config.json").exists():
        from peft import PeftModel

        base = ModelRegistry().path(base_model)
        with quiet_model_load():
            model = auto_class.from_pretrained(str(base), **model_kwargs)
            model = PeftModel.from_pretrained(model, str(ckpt)).merge_and_unload()
        tok_path = ckpt if (ckpt / "tokenizer_config.json").exists() else base
    else:
        with quiet_model_load():
            model = auto_class.from_pretrained(str(ckpt), **model_kwargs)
        tok_path = ckpt
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(tok_path))
