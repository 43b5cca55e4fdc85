"""Load a Hugging Face checkpoint folder into minicb's own CausalLM, offline, from safetensors."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from minicb.model.config import ModelConfig, read_model_config
from minicb.model.llama import CausalLM, RotaryEmbedding

BARD_PATH = Path(__file__).resolve().parent.parent / "assets" / "bard"


def resolve_model_path(model: str | Path | None) -> Path:
    """None means the shipped Bard model; anything else must be a local folder."""
    path = BARD_PATH if model is None else Path(model).expanduser()
    if path.is_file():
        guess = f" ({str(path.parent)!r} here)" if (path.parent / "config.json").is_file() else ""
        raise NotADirectoryError(
            f"model path {str(path)!r} is a file, not a folder: pass the folder that holds config.json and "
            f"*.safetensors{guess}")
    if not path.is_dir():
        raise FileNotFoundError(
            f"model folder {str(path)!r} does not exist: pass a local folder holding config.json and "
            "*.safetensors (minicb never downloads from a hub; `huggingface-cli download` can fetch one "
            "on a machine that has access), or omit the model to use the shipped Bard model")
    return path


def _checkpoint_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    single = folder / "model.safetensors"
    if single.exists():
        return [single]
    raise FileNotFoundError(f"{folder} has no model.safetensors or model.safetensors.index.json; "
                            "minicb reads safetensors only (convert .bin weights with save_pretrained)")


def load_model(model: str | Path | None = None, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> tuple[CausalLM, ModelConfig]:
    folder = resolve_model_path(model)
    config = read_model_config(folder)
    with torch.device("meta"):
        lm = CausalLM(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in lm.state_dict().items()}   # meta: shapes, no data
    expected = set(shapes)
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    tensors: dict[str, torch.Tensor] = {}
    for file in _checkpoint_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():   # noqa: SIM118 (safe_open is not iterable)
                if name in expected:
                    found = tuple(f.get_slice(name).get_shape())
                    if found != shapes[name]:
                        raise ValueError(
                            f"tensor {name!r} in {file} has shape {list(found)} but {folder / 'config.json'} "
                            f"implies {list(shapes[name])}: the weights and config.json come from different "
                            "models; use the config.json saved with these weights")
                    tensors[name] = f.get_tensor(name).to(dtype)
    missing = expected - tensors.keys()
    if missing:
        raise ValueError(f"checkpoint in {folder} lacks {len(missing)} weights minicb needs, "
                         f"e.g. {sorted(missing)[:3]}; is config.json from the same model?")
    lm.load_state_dict(tensors, strict=False, assign=True)
    if config.tie_word_embeddings:
        lm.lm_head.weight = lm.model.embed_tokens.weight
    lm.rotary = RotaryEmbedding(config)  # its buffer was built on meta, without values
    return lm.to(device).eval(), config
