"""Models by hub id, read offline from a hub cache laid out on the spot, and the switches MINICB_MODEL,
MINICB_DEVICE and MINICB_DTYPE that set what every lesson runs on (minicb/config.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants as hub_constants

from minicb import course
from minicb.config import EngineConfig
from minicb.llm import LLM
from minicb.model.loader import resolve_model_path
from minicb.sampling import SamplingParams

REPO_ID = "tiny-org/tiny-qwen2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SWITCHES = ("MINICB_MODEL", "MINICB_DEVICE", "MINICB_DTYPE")
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = [[1, 2, 3, 4, 5], [300, 7, 42], [9] * 20]


def add_to_hub_cache(cache: Path, repo_id: str, folder: Path) -> Path:
    """What `hf download` leaves: refs/main names a commit, snapshots/<commit>/ holds its files (plain
    files here; the hub's own cache links them to blobs/)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(folder, snapshot)
    return snapshot


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """An empty hub cache under HF_HOME in tmp_path, with HF_HUB_OFFLINE=1. huggingface_hub reads these
    variables once, when it is imported, so its constants get the same values (test_env_variables_alone...
    checks a fresh process that has only the variables)."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(cache.parent))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return cache


@pytest.fixture
def no_switches(monkeypatch) -> None:
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)


def greedy_tokens(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def test_hub_id_loads_from_the_offline_cache_like_its_folder(tiny_checkpoint, offline_hub):
    folder, _ = tiny_checkpoint("qwen2")
    snapshot = add_to_hub_cache(offline_hub, REPO_ID, folder)
    by_id = LLM(REPO_ID, device="cpu", num_blocks=64, block_size=8)
    assert by_id.engine.runner.model_path == snapshot
    assert by_id.engine.config.model == REPO_ID
    local = LLM(str(folder), device="cpu", num_blocks=64, block_size=8)
    assert greedy_tokens(by_id) == greedy_tokens(local)
    assert resolve_model_path(f"{REPO_ID}@main") == snapshot   # a revision: the branch refs/main names


def test_hub_id_missing_from_the_offline_cache_names_the_fixes(offline_hub):
    with pytest.raises(FileNotFoundError) as err:
        LLM("nobody-org/not-cached", device="cpu")
    message = str(err.value)
    for fix in ("'nobody-org/not-cached' is neither a local folder nor in the hub cache", "HF_HUB_OFFLINE=0",
                "`hf download nobody-org/not-cached`", "pass a local folder"):
        assert fix in message


def test_a_local_folder_wins_over_the_hub_id_of_the_same_name(tiny_checkpoint, offline_hub, tmp_path, monkeypatch):
    folder, _ = tiny_checkpoint("qwen2")
    work = tmp_path / "work"
    shutil.copytree(folder, work / REPO_ID)
    monkeypatch.chdir(work)
    assert resolve_model_path(REPO_ID) == Path(REPO_ID)   # no cache entry: the hub is never asked
    add_to_hub_cache(offline_hub, REPO_ID, folder)
    assert resolve_model_path(REPO_ID) == Path(REPO_ID)
    assert LLM(REPO_ID, device="cpu", num_blocks=64, block_size=8).engine.runner.model_path == Path(REPO_ID)


def test_paths_that_are_no_hub_id_keep_the_local_folder_errors(tmp_path, offline_hub):
    with pytest.raises(FileNotFoundError, match="does not exist: pass a local folder"):
        resolve_model_path(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path("./absent/model")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        resolve_model_path(tmp_path / "config.json")


def test_env_variables_alone_point_a_fresh_process_at_the_cache(tiny_checkpoint, tmp_path):
    """HF_HUB_CACHE and HF_HUB_OFFLINE as a user sets them: before the process starts, no constants patched."""
    folder, _ = tiny_checkpoint("qwen2")
    cache = tmp_path / "hub"
    snapshot = add_to_hub_cache(cache, REPO_ID, folder)
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    env.update(HF_HOME=str(tmp_path / "home"), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    code = ("from minicb.model.loader import resolve_model_path as r\nprint(r(%r))\n"
            "try:\n    r('nobody-org/not-cached')\nexcept FileNotFoundError as e:\n    print(e)") % REPO_ID
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    found, error = out.stdout.splitlines()[:2]
    assert Path(found) == snapshot
    assert "HF_HUB_OFFLINE=0" in error


def test_switches_unset_leave_the_defaults(no_switches):
    c = EngineConfig()
    assert (c.model, c.device, c.dtype) == (None, "auto", None)


def test_switches_fill_what_is_not_given_and_arguments_win(monkeypatch):
    monkeypatch.setenv("MINICB_MODEL", "some-org/some-model")
    monkeypatch.setenv("MINICB_DEVICE", "cpu")
    monkeypatch.setenv("MINICB_DTYPE", "bfloat16")
    c = EngineConfig()
    assert (c.model, c.device, c.dtype) == ("some-org/some-model", "cpu", "bfloat16")
    c = EngineConfig(model="/a/folder", device="auto", dtype="float32")
    assert (c.model, c.device, c.dtype) == ("/a/folder", "auto", "float32")
    monkeypatch.setenv("MINICB_MODEL", "")   # empty: unset
    assert EngineConfig().model is None


def test_the_lessons_helpers_run_on_the_switched_model(tiny_checkpoint, no_switches, monkeypatch):
    folder, _ = tiny_checkpoint("qwen2")
    monkeypatch.setenv("MINICB_MODEL", str(folder))
    monkeypatch.setenv("MINICB_DEVICE", "cpu")
    monkeypatch.setenv("MINICB_DTYPE", "bfloat16")
    llm = course.llm(lesson=2, num_blocks=64, block_size=8)
    assert llm.engine.runner.model_path == folder
    assert (llm.engine.runner.device.type, llm.engine.runner.dtype) == ("cpu", torch.bfloat16)
    assert len(greedy_tokens(llm)[0]) == GREEDY.max_tokens
    sim = course.engine(lesson=6, simulate=True, num_blocks=64)
    assert sim.runner.model_path == folder
    assert LLM(None, device="cpu", dtype="float32", num_blocks=64).engine.runner.dtype == torch.float32
