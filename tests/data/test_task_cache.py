"""The cache of generated reasoning-gym rows (pods/data/tasks.py, task_cache_path): a run reads back exactly the
rows reasoning-gym generates for the same settings, without importing it; anything else generates again."""

import json
import sys

import pytest
from omegaconf import OmegaConf

from pods.config import DatasetConfig
from pods.data import load_examples, tasks
from pods.errors import ConfigError
from pods.train import check_task_config


def rg(**kw):
    base = {"name": "t", "source": "reasoning_gym", "task": "chain_sum", "train_size": 50, "eval_size": 10}
    return OmegaConf.merge(OmegaConf.structured(DatasetConfig), base, kw)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PODS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def no_generation(monkeypatch):
    """From here on, importing reasoning-gym fails: whatever loads came from the cache."""
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)


def test_a_cached_task_reads_back_the_generated_rows_without_reasoning_gym(cache, monkeypatch):
    cfg = rg(task_kwargs={"min_terms": 2, "max_terms": 4})
    fresh = {split: load_examples(cfg, split) for split in ("train", "eval")}
    assert sorted(p.name.split("-")[0] for p in (cache / "reasoning_gym").iterdir()) == [
        "chain_sum",
        "chain_sum",
    ]
    assert tasks.task_is_cached(cfg)
    no_generation(monkeypatch)
    check_task_config(cfg)  # settings that generated both splits before: no reasoning-gym needed
    for split in ("train", "eval"):
        (ex, rep), (ex0, rep0) = load_examples(cfg, split), fresh[split]
        assert ex == ex0 and rep == rep0
        assert [e.fields for e in ex] == [e.fields for e in ex0]  # metadata too, its tuples as tuples
    assert isinstance(ex[0].fields["metadata"]["difficulty"]["num_terms"], tuple)


@pytest.mark.parametrize(
    "change", [{"data_seed": 7}, {"train_size": 51}, {"task_kwargs": {"min_terms": 3, "max_terms": 4}}]
)
def test_other_settings_are_another_entry(cache, change):
    base = rg(task_kwargs={"min_terms": 2, "max_terms": 4})
    assert tasks.task_cache_path(base, "train") != tasks.task_cache_path(
        OmegaConf.merge(base, change), "train"
    )
    assert tasks.task_cache_path(base, "train") != tasks.task_cache_path(base, "eval")


def test_off_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PODS_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tasks.task_cache_path(rg(), "train") is None
    load_examples(rg(), "train")
    assert not any(tmp_path.rglob("*.json"))


def test_a_damaged_entry_is_generated_again_and_replaced(cache, caplog):
    cfg = rg()
    want = load_examples(cfg, "train")[0]
    path = tasks.task_cache_path(cfg, "train")
    path.write_text('[["chain_sum item 0", {"question": ')  # cut off mid-write by something else
    with caplog.at_level("WARNING", logger="pods"):
        assert load_examples(cfg, "train")[0] == want
    assert "is unreadable; generating the task again" in caplog.text
    assert json.loads(path.read_text())["data"][0][0] == "chain_sum item 0"  # written whole again


def test_rows_that_would_not_read_back_equal_are_not_cached(tmp_path):
    path = tmp_path / "entry.json"
    tasks._write_task_cache(
        path, [("item 0", {"question": "q", "answer": "1", "metadata": {"seen": {1, 2}}})]
    )
    tasks._write_task_cache(path, [("item 0", {"question": "q", "answer": "1", "metadata": {1: "int key"}})])
    assert not path.exists()
    tasks._write_task_cache(
        path, [("item 0", {"question": "q", "answer": "1", "metadata": {"r": (1, [2, (3,)])}})]
    )
    assert tasks._read_task_cache(path) == [
        ("item 0", {"question": "q", "answer": "1", "metadata": {"r": (1, [2, (3,)])}})
    ]


def test_bad_task_settings_are_still_refused_in_one_line(cache):
    cfg = rg(task_kwargs={"min_terms": 5, "max_terms": 2})
    with pytest.raises(ConfigError, match="dataset.task_kwargs="):
        check_task_config(cfg)
    assert not tasks.task_is_cached(cfg)
