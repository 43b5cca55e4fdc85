"""Every lesson, top to bottom, on another model: MINICB_MODEL names a tiny random-init Qwen2 built here, so a
lesson may assume nothing of Bard's weights, architecture or sizes. The tiny model borrows Bard's tokenizer,
so that the lessons' text prompts encode. Outputs are not compared (nbval does that, on Bard, under `make
test`); a cell that raises fails its lesson, and the failure names the lesson and the cell.

The lessons run one after another, each in a fresh kernel, with MINICB_IMPL=solutions and notebooks/ as the
working directory, as nbval runs them. It takes minutes, so `make test` skips it: `make test-any-model` (or
`pytest tests/test_any_model.py --any-model`) runs it. MINICB_DEVICE and MINICB_DTYPE pass through, so on a
GPU machine every lesson runs there.

`--lesson-model smollm2` (`make test-real-model-lessons`) runs them on that model instead, a real pretrained one
with its own tokenizer and vocabulary, fetched beforehand by `make real-model`.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import save_random_checkpoint

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.any_model   # skipped unless --any-model (tests/conftest.py)


@pytest.fixture(scope="module")
def lesson_model(request, tmp_path_factory) -> str:
    """What MINICB_MODEL names for every lesson: --lesson-model when given, else the tiny Qwen2 built here."""
    chosen = request.config.getoption("--lesson-model")
    if chosen:
        from minicb.model.loader import resolve_model_path
        resolve_model_path(chosen)   # a model that is not there fails once, here, naming the command that fetches it
        return chosen
    return str(tiny_qwen2(tmp_path_factory))


def tiny_qwen2(tmp_path_factory) -> Path:
    """A Qwen2 of two layers (grouped-query attention, biased QKV, untied embeddings: not Bard's Llama),
    with Bard's vocabulary and tokenizer, and the 1,024 positions the lessons' longest prompts need."""
    from transformers import AutoTokenizer, Qwen2Config

    from minicb.model.config import read_model_config
    from minicb.model.loader import BARD_PATH

    tokenizer = AutoTokenizer.from_pretrained(str(BARD_PATH))
    config = Qwen2Config(vocab_size=read_model_config(BARD_PATH).vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=False,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return save_random_checkpoint(config, tmp_path_factory.mktemp("tiny-qwen2"), seed=0, tokenizer=tokenizer)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_lesson_runs_on_another_model(path: Path, lesson_model: str, monkeypatch):
    monkeypatch.setenv("MINICB_MODEL", lesson_model)   # the kernel inherits this process's environment
    monkeypatch.setenv("MINICB_IMPL", "solutions")
    nb = nbformat.read(path, as_version=4)
    started: list[int] = []   # the index of each cell as it starts: the last one is the one that failed
    client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_start=lambda cell, cell_index: started.append(cell_index))
    try:
        client.execute()
    except Exception as error:   # a cell raised (CellExecutionError) or ran past the timeout
        if not started:
            raise
        index = started[-1]
        code_index = sum(c.cell_type == "code" for c in nb.cells[:index])   # as nbval and check_notebooks count
        first_line = (nb.cells[index].source.strip().splitlines() or [""])[0]
        message = re.sub(r"\x1b\[[0-9;]*m", "", str(error))   # the traceback without its terminal colours
        pytest.fail(f"{path.name}, cell {index} (code cell {code_index}: {first_line[:70]!r}) with "
                    f"MINICB_MODEL={lesson_model}: {type(error).__name__}: {message}", pytrace=False)
