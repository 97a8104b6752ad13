"""Names that moved keep working for one release: they resolve to the new object and warn once."""
from __future__ import annotations

import warnings

import pytest
from hydra.utils import instantiate

from lightmem import deprecation
from lightmem.retrieval import stage2


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(deprecation, "_warned", set())  # each old name warns once per process


def test_a_config_naming_a_selector_at_its_former_path_still_builds_it():
    with pytest.warns(DeprecationWarning, match="lightmem.retrieval.stage2.Stage1Selector"):
        selector = instantiate({"_target_": "lightmem.roles.selector.Stage1Selector"})
    assert isinstance(selector, stage2.Stage1Selector)


def test_a_former_name_warns_once_and_an_unknown_name_is_still_an_error():
    import lightmem.roles.selector as roles_selector

    with pytest.warns(DeprecationWarning):
        assert roles_selector.LearnedRanker is stage2.LearnedRanker
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert roles_selector.LearnedRanker is stage2.LearnedRanker  # the second time is silent
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        roles_selector.Nothing  # noqa: B018
