"""What several runners share: the QA options of a config, and the metric a sweep optimises."""
from __future__ import annotations

import logging
from collections.abc import Mapping

from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import SharedRuntime
from lightmem.evaluation.harnesses.qa import QAOptions

log = logging.getLogger(__name__)


def qa_options(cfg: DictConfig, shared: SharedRuntime) -> QAOptions | None:
    """The generator is the ``llm`` node's runtime; the judge an LLM node of its own, when set."""
    qa = cfg.get("qa")
    if qa is None or not qa.enabled:
        return None
    judge = instantiate(qa.judge) if qa.get("judge") else None
    return QAOptions(llm=shared.llm(), judge=judge, batch_size=int(qa.batch_size), max_new_tokens=int(qa.max_new_tokens),
                     controls=bool(qa.get("controls", False)), instruction=str(qa.get("instruction", "decline")))


def optimized_metric(metrics: Mapping[str, float | None], cfg: DictConfig) -> float | None:
    """The value of the metric ``cfg.optimized_metric`` names (what an entry point returns to a sweeper).

    Args:
        metrics: A runner's flat metrics (``metrics(results)`` of its module), the names it logs.
        cfg: The run's config; ``optimized_metric`` unset or null means nothing is optimised.

    Returns:
        The metric's value; 0.0 when the run has no such number (e.g. ``lme/session_recall_all@10`` of a
        run with ``ks=[1,4]``, or None: nothing to average), with a warning that lists the metrics it has;
        None when no metric is named.
    """
    name = cfg.get("optimized_metric")
    if not name:
        return None
    value = metrics.get(name)
    if value is None:
        log.warning("optimized_metric=%s has no value in this run (0.0 returned); its metrics: %s", name, ", ".join(sorted(metrics)))
        return 0.0
    return float(value)
