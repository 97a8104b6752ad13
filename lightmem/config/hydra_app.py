"""What the entry points do around Hydra: register resolvers and schemas, compose one option,
give each multirun job its own output folder."""
from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict

from lightmem.datasets.catalog import repo_root


def register_resolvers() -> None:
    """The ``${lightmem_repo:}`` resolver that conf/paths/default.yaml roots the data folder at,
    ``${lightmem_checkpoint:name}`` (``$LIGHTMEM_CHECKPOINTS/name`` or the source tree's checkpoints/name), and the
    sweep's: ``${lightmem_sweep:}`` (conf/logger/wandb.yaml's group), ``${lightmem_sweep_name:job,dir}`` and
    ``${lightmem_sqlite:path}`` (conf/hparams_search/*.yaml's Optuna study)."""
    if not OmegaConf.has_resolver("lightmem_repo"):
        OmegaConf.register_new_resolver("lightmem_repo", lambda: str(repo_root()))
    if not OmegaConf.has_resolver("lightmem_checkpoint"):
        from lightmem.models.registry import checkpoint_path

        OmegaConf.register_new_resolver("lightmem_checkpoint", lambda name: str(checkpoint_path(name)))
    if not OmegaConf.has_resolver("lightmem_sweep"):
        OmegaConf.register_new_resolver("lightmem_sweep", running_sweep)
        OmegaConf.register_new_resolver("lightmem_sweep_name", sweep_name)
        OmegaConf.register_new_resolver("lightmem_sqlite", sqlite_url)


def sweep_name(job_name: str, sweep_dir: str) -> str:
    """A sweep's name: its script's job name and its folder's name (``cross_encoder-2026-11-29_08-50-00`` for
    ``multirun/train_cross_encoder/2026-11-29_08-50-00``), which every trial of it shares."""
    return f"{job_name}-{Path(str(sweep_dir)).name}"


def running_sweep() -> str | None:
    """The name of the Hydra sweep this job belongs to (``sweep_name``); None in a single run or outside Hydra.

    Inside a ``-m`` job the sweep's folder is the same in every trial (Hydra copies the sweeper's resolved
    ``${now:}`` into each job, submitit's included), so the trials of one sweep get one name."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra_cfg = HydraConfig.get()
    return sweep_name(hydra_cfg.job.name, hydra_cfg.sweep.dir)


def sqlite_url(path: str) -> str:
    """``sqlite:///<absolute path>`` of a database file, its folder made: the Optuna sweeper opens its study
    before the launcher makes the sweep's folder, and SQLite will not create a folder."""
    file = Path(str(path)).expanduser().resolve()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{file}"


def register_schemas(schemas: Mapping[str, type]) -> None:
    """Store ``schemas`` (name → dataclass) in Hydra's ConfigStore, where the YAML files of conf/
    find them (``defaults: [schema_...]``), and register the resolvers. Entry points call this
    (through ``lightmem.evaluation.runs.entry.register_configs`` or ``lightmem.training.schemas.register_configs``)
    before Hydra composes; importing lightmem registers nothing."""
    register_resolvers()
    _share_the_config_store()
    from lightmem.config.schemas import STORE_SCHEMAS

    for name, node in schemas.items():
        _store_once(None, name, node)
    for name, node in STORE_SCHEMAS.items():  # each backend's node, which conf/store/*.yaml extend
        _store_once("store", name, node)


def _share_the_config_store() -> None:
    """Make a deep copy of Hydra's ConfigStore the store itself, as it is a process-wide singleton.

    Every compose deep-copies Hydra's config repository (``CachingConfigRepository``), and hydra-core 1.3's
    structured-config source holds the ConfigStore, so each compose also copied every registered schema:
    about half of a compose's 0.2-0.3 s here. Hydra's own fix (facebookresearch/hydra#2928, not in a 1.3
    release) makes that source read the live singleton instead; sharing it on copy does the same. Nothing is
    written through the copy: ``ConfigStore.load`` hands out a deep copy of each node it returns."""
    if "__deepcopy__" not in vars(ConfigStore):
        ConfigStore.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]


_STORED: dict[tuple[str | None, str], Any] = {}


def _store_once(group: str | None, name: str, node: Any) -> None:
    """``ConfigStore.store`` unless this very node is stored there already: storing converts the dataclass
    to a config each time (~0.5 s for all of them), and every compose registers them."""
    cs = ConfigStore.instance()
    folder = cs.repo.get(group, {}) if group else cs.repo
    if _STORED.get((group, name)) is node and f"{name}.yaml" in folder:
        return
    cs.store(group=group, name=name, node=node)
    _STORED[(group, name)] = node


def compose_option(config_dir: str | Path, config_name: str, group: str, option: str) -> DictConfig:
    """The ``group`` node of ``config_name`` with ``group=option``, composed by Hydra itself.

    Works inside a running ``@hydra.main`` app and outside one (tests, notebooks); inside one, when
    ``option`` is the app's own choice for ``group``, the command line's overrides of keys under
    ``group`` (``sensory.compress.rate=0.5``) apply to it too.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"{group}={option}"]
    if GlobalHydra.instance().is_initialized():
        overrides += _overrides_under(group, option)
        return compose(config_name=config_name, overrides=overrides)[group]
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)[group]


def _overrides_under(group: str, option: str) -> list[str]:
    """The running app's command-line overrides of keys under ``group`` when ``option`` is its choice
    for the group (none outside an app or for another option)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or HydraConfig.get().runtime.choices.get(group) != option:
        return []
    return [o for o in HydraConfig.get().overrides.task if o.lstrip("+~").startswith(f"{group}.")]


def to_container(cfg: DictConfig | Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def per_job(cfg: DictConfig) -> DictConfig:
    """Inside a Hydra multirun, give each job its own ``out_dir`` (its sweep subdir,
    ``${hydra:runtime.output_dir}``: ``multirun/<config>/<start time>/<job number>``, where Hydra already writes the
    job's log and ``.hydra/``) and, where the config has one, no ``export_dir``. Without it the jobs of a sweep share
    one folder: trainers would resume from each other's state and overwrite the committed checkpoint, evaluations
    would overwrite each other's results.json (at once, under a parallel launcher). Every train/ and eval/ script
    calls it; single runs (and configs composed outside a Hydra app: the suite's parts, tests) are left as
    configured."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return cfg
    with open_dict(cfg):
        cfg.out_dir = HydraConfig.get().runtime.output_dir
        if "export_dir" in cfg:
            cfg.export_dir = None
    return cfg


def script_app(script_file: str, config_name: str, task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
    """``@hydra.main`` for a script's ``task``, written once for every eval/, train/ and data_gen/ script.

    The configs are the ``conf/`` folder beside the script's folder, and Hydra takes the script for the job
    (``hydra.job.name``: the run's log file ``<out_dir>/<stem>.log``; the folder a relative ``--config-path``
    starts from), as with ``@hydra.main`` written in the script itself: command-line overrides, ``--multirun``,
    ``--config-name`` and ``--cfg job`` work as usual. The caller registers its schemas before calling the app.
    """
    import hydra

    conf = Path(os.path.realpath(script_file)).parent.parent / "conf"

    def job(cfg: DictConfig) -> Any:
        # A launcher that runs the job in another process (submitit: a SLURM node, or a local subprocess) brings
        # the config store but not OmegaConf's resolvers, which conf/ interpolates (${lightmem_repo:} ...).
        register_resolvers()
        return task(cfg)

    # Hydra unwraps __wrapped__ to find the task's file: a no-op whose code names the script.
    job.__wrapped__ = types.FunctionType((lambda cfg: None).__code__.replace(co_filename=str(script_file)), {})
    app = hydra.main(version_base="1.3", config_path=str(conf), config_name=config_name)(job)

    def main() -> Any:
        with warnings.catch_warnings():
            # conf/hydra/launcher/submitit_*.yaml take the names of the plugin's own options on purpose (the command is
            # hydra/launcher=submitit_slurm), so hydra-core 1.3 checks them against the plugin's schema, and says so.
            warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/submitit_\w+' is validated against ConfigStore schema")
            return app()

    return main

