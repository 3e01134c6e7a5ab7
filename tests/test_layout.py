"""The package reads as its architecture (tools/import_graph.py): no import circle, at most
two imports running back up a layer, every part in a layer; the module paths from before the
systems/ and index/ folders are gone."""
import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import import_graph  # noqa: E402


def test_no_import_circle():
    assert import_graph.cycles(import_graph.graph()) == []


def test_no_circle_between_the_modules_of_one_part():
    # e.g. qa_eval's run and systems imported each other (issue 40): a part-level graph hides it
    assert import_graph.cycles(import_graph.module_graph()) == []


def test_at_most_two_imports_back_up_a_layer_and_every_part_placed():
    up, unplaced = import_graph.upward(import_graph.graph())
    assert not unplaced, f"parts in no layer of tools/import_graph.py LAYERS: {unplaced}"
    assert len(up) <= 2, up


def test_the_checker_sees_a_circle():
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    up, _ = import_graph.upward({"ops": {"systems.ras"}})
    assert up == [("ops", "systems.ras")]


@pytest.mark.parametrize("old", ["rasfast.pipeline", "rasfast.pipeline.types", "rasfast.gear", "rasfast.kirag",
                                 "rasfast.structrag", "rasfast.knowledge", "rasfast._index_store",
                                 "rasfast._durable", "rasfast.systems.ras.types", "rasfast.systems.ras.parse"])
def test_old_paths_are_gone(old):
    """No shim keeps the module paths from before systems/ and index/: rasfast has no outside
    users to stay compatible with, so an old import fails loudly instead of aliasing."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_public_api_unchanged():
    import rasfast
    from rasfast.index import ThemeIndex
    from rasfast.index.knowledge import KnowledgeIndex
    from rasfast.systems import build_system
    from rasfast.systems.kirag import KiRAG
    from rasfast.systems.ras import RAS
    assert rasfast.ThemeIndex is ThemeIndex and rasfast.KiRAG is KiRAG and rasfast.RAS is RAS
    assert rasfast.KnowledgeIndex is KnowledgeIndex and rasfast.build_system is build_system
    from rasfast.distributed import DistributedThemeIndex
    assert rasfast.DistributedThemeIndex is DistributedThemeIndex
