"""One way to choose an encoder: the CLI, the server (HTTP and MCP), Python and Hydra build the same one for each name."""
from __future__ import annotations

import pytest
from conftest import compose

from lightmem.build import ENCODER_CHOICES, new_embedder, resolve_embedder
from lightmem.errors import LightMemError
from lightmem.memory import Memory

# The Hydra encoder group option that configures each choice (what the evaluation and training entry points compose).
HYDRA = {"tuned": "mpnet_tuned", "mpnet": "mpnet", "minilm": "minilm", "hashing": "hashing"}


# A model's choice builds the packaged encoder (and its int8 graph) at every entry point: slow.
@pytest.mark.parametrize("choice", [c if c == "hashing" else pytest.param(c, marks=pytest.mark.slow) for c in ENCODER_CHOICES])
def test_every_entry_point_builds_the_same_encoder_for_a_name(choice, tmp_path):
    from hydra.utils import instantiate

    from lightmem.cli import _open
    from lightmem.server.settings import open_memory

    expected = new_embedder(choice).name
    if choice != "hashing":  # a model encoder: read length and int8 recipe as Memory.open's default has them
        assert "+len128+int8" in expected, expected
    with _open(str(tmp_path / "cli"), choice) as cli:
        assert cli.embedder.name == expected
    with open_memory(str(tmp_path / "server"), choice, selector="none") as served:
        assert served.embedder.name == expected
    with Memory.open(tmp_path / "python", embedder=new_embedder(choice)) as python:
        assert python.embedder.name == expected
    assert instantiate(compose("locomo", [f"encoder={HYDRA[choice]}"]).encoder).name == expected
    # Reopened without a choice, each store gets back the encoder that wrote it.
    for folder in ("cli", "server", "python"):
        assert resolve_embedder(tmp_path / folder).name == expected


def test_the_default_is_the_tuned_encoder(tmp_path):
    with Memory.open(tmp_path / "s") as memory:
        assert memory.embedder.name == new_embedder("tuned").name == new_embedder(None).name


def test_a_store_refuses_another_encoder_and_an_unknown_name_is_refused(tmp_path):
    from lightmem.server.settings import open_memory

    with open_memory(str(tmp_path / "s"), "hashing", selector="none") as memory:
        memory.add("I moved to Oslo.", "alice")
    with pytest.raises(LightMemError, match="drop --encoder"):
        open_memory(str(tmp_path / "s"), "minilm", selector="none")
    with pytest.raises(LightMemError, match="unknown encoder"):
        new_embedder("bert")
    with pytest.raises(LightMemError, match="unknown encoder"):
        resolve_embedder(tmp_path / "new", "bert")
