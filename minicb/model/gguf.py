"""GGUF checkpoints (llama.cpp's one-file format, usually quantized): converted once into a Hugging Face folder
(config.json, generation_config.json, the tokenizer's files with its chat template, model.safetensors), which the
loader then reads like any other.

Why a converted folder, not a GGUF reader inside the loader: transformers (with the `gguf` package) already
dequantizes every GGUF quantization and rebuilds the tokenizer and chat template from the file's metadata, so minicb
writes no dequantization of its own; but it takes half a minute for a 135M model, most of it rebuilding the
tokenizer. Done once and kept, a GGUF then starts as fast as any folder, and one loader, with its shape checks,
serves both. The weights are kept in fp32: a quantized block is a scale times small integers (plus an offset),
which fp32 holds exactly, and the loader casts them to the engine's dtype as it reads them, as for any checkpoint.

Where: `$MINICB_CACHE`, else `$XDG_CACHE_HOME/minicb`, else `~/.cache/minicb`; a GGUF file's folder is
gguf/<its name>-<key>, the key made of its absolute path, size and modification time, so that a file replaced
or changed gets a new folder, and finding the folder never reads the file whole (hashing a GGUF of several GB would
cost seconds on every start).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

GGUF_MAGIC = b"GGUF"
# general.architecture of the GGUFs whose converted config minicb's forward runs. Mistral's GGUFs say "llama".
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
INSTALL_FIX = ("pip install 'minicb[gguf]' (in a checkout: make real-model, or "
               ".venv/bin/pip install -c constraints.txt gguf accelerate)")


def cache_root() -> Path:
    """Where minicb keeps what it converts or fetches (converted GGUFs, `make real-model`)."""
    root = os.environ.get("MINICB_CACHE", "").strip()
    if root:
        return Path(root).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache") / "minicb"


def is_gguf(path: Path) -> bool:
    """Whether a file is a GGUF, by its name or by its first four bytes (a GGUF saved under another name)."""
    if path.suffix.lower() == ".gguf":
        return True
    with path.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def gguf_folder(path: Path) -> Path:
    """The converted folder of the GGUF file at `path`, made on the first call for this file."""
    path = path.resolve()
    stat = path.stat()
    key = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = cache_root() / "gguf" / f"{path.stem}-{key}"
    if (folder / "config.json").is_file():
        return folder
    return convert_gguf(path, folder)


def _gguf_architecture(path: Path) -> str:
    """general.architecture from the file's header, before the costly conversion, with what to do if it is no GGUF."""
    from gguf import GGUFReader

    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{str(path)!r} is not a GGUF file (it does not start with b'GGUF'): a download cut "
                             "short, or another format; fetch the .gguf again, or pass a Hugging Face model folder")
    try:
        field = GGUFReader(path).fields["general.architecture"]
    except (KeyError, ValueError, IndexError) as err:
        raise ValueError(f"GGUF file {str(path)!r} cannot be read ({err!r}): it may be truncated or written by a "
                         "newer llama.cpp than gguf reads; fetch it again, or upgrade the gguf package") from None
    return bytes(field.parts[field.data[0]]).decode()


def _require_gguf_support() -> None:
    try:
        import accelerate  # noqa: F401 (transformers refuses a GGUF without it)
        import gguf  # noqa: F401
    except ImportError as err:
        raise ImportError(f"reading a GGUF file needs the gguf and accelerate packages ({err}): {INSTALL_FIX}"
                          ) from None


def convert_gguf(path: Path, folder: Path) -> Path:
    """Dequantize the GGUF at `path` with transformers into a Hugging Face folder at `folder`, and return it.
    The folder appears whole or not at all: it is written beside its place and renamed into it."""
    _require_gguf_support()
    arch = _gguf_architecture(path)
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"GGUF file {str(path)!r} holds a {arch!r} model; minicb runs the Llama family only: use a "
                         f"GGUF whose architecture is one of {', '.join(GGUF_ARCHITECTURES)} (Mistral's say "
                         "'llama'), or a Hugging Face folder of a supported model")
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    source = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name}
    try:
        with tqdm(total=3, desc=f"converting {path.name}", unit="step") as bar, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bar.set_postfix_str("tokenizer and chat template")
            AutoTokenizer.from_pretrained(**source).save_pretrained(partial)
            bar.update()
            bar.set_postfix_str("dequantizing the weights")
            model = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
            bar.update()
            bar.set_postfix_str(f"writing {folder}")
            _save(model, partial)
            bar.update()
        try:
            partial.rename(folder)
        except OSError:   # another process converted the same file meanwhile: keep its folder
            if not (folder / "config.json").is_file():
                raise
            shutil.rmtree(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder


def _save(model, folder: Path) -> None:
    """config.json without transformers' GGUF quantization entry, which says the weights are still quantized (and so
    makes transformers refuse to load the folder), nor the temporary folder it was read from; model.safetensors in
    fp32, the tied LM head stored once, as the embedding, since the loader ties it back."""
    from safetensors.torch import save_file

    config = model.config.to_dict()
    for stale in ("quantization_config", "_name_or_path"):
        config.pop(stale, None)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    model.generation_config.save_pretrained(folder)
    tensors = {name: tensor.contiguous() for name, tensor in model.state_dict().items()
               if not (model.config.tie_word_embeddings and name == "lm_head.weight")}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
