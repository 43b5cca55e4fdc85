"""ModelConfig: the few numbers of a Hugging Face `config.json` that a Llama-family forward needs."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from minicb.checks import is_int

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
# A config may name its family by model_type alone (one written by a converter, say); transformers then picks the
# causal-LM class of that family, and so does minicb.
ARCHITECTURE_OF_MODEL_TYPE = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                              "qwen3": "Qwen3ForCausalLM"}
# The sizes every Llama-family config.json states; the rest have defaults.
REQUIRED_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int           # fewer than num_heads means grouped-query attention (GQA)
    head_dim: int               # Qwen3 sets it explicitly; elsewhere hidden_size // num_heads
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool   # small models reuse the embedding matrix as the LM head
    qkv_bias: bool              # Qwen2 has biases on q/k/v; Llama can turn them on with attention_bias
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool               # Qwen3 RMS-normalises each head of q and k before RoPE
    rope_theta: float
    rope_scaling: dict | None   # None, or llama3's frequency-dependent scaling
    eos_token_ids: tuple[int, ...]  # from generation_config.json where present, else config.json
    max_model_len: int          # the longest context served; Mistral's sliding window caps it

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes one KV block takes: K and V of block_size tokens in every layer."""
        return self.num_layers * 2 * block_size * self.kv_dim * dtype.itemsize


def _rope_settings(raw: dict) -> tuple[float, dict | None]:
    """transformers 5 writes `rope_parameters`; older checkpoints write `rope_theta` + `rope_scaling`."""
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", None) or raw.get("rope_theta") or 10000.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ValueError(f"rope type {rope_type!r} is not supported by minicb; supported: 'default', 'llama3'")
    return theta, params


def _eos_ids(raw: dict, folder: Path) -> tuple[int, ...]:
    ids = raw.get("eos_token_id")
    gen = folder / "generation_config.json"
    if gen.exists():
        ids = json.loads(gen.read_text()).get("eos_token_id", ids)
    if ids is None:
        return ()
    return tuple(ids) if isinstance(ids, list) else (int(ids),)


def read_model_config(folder: str | Path) -> ModelConfig:
    folder = Path(folder)
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no config.json in {folder}: pass a local Hugging Face model folder (minicb never downloads "
            "weights), or leave the model unset to use the shipped Bard model")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); restore the config.json saved with the weights") from err
    arch = (raw.get("architectures") or [ARCHITECTURE_OF_MODEL_TYPE.get(raw.get("model_type"), "<missing>")])[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        named = f"architecture {arch!r}" if arch != "<missing>" else f"model_type {raw.get('model_type')!r}"
        raise ValueError(f"{named} in {path} is not supported; minicb supports {', '.join(SUPPORTED_ARCHITECTURES)} "
                         f"(architectures), or model_type {', '.join(map(repr, ARCHITECTURE_OF_MODEL_TYPE))}")
    if raw.get("layer_types") and any(t != "full_attention" for t in raw["layer_types"]):
        raise ValueError(f"{path} uses sliding-window layers ({set(raw['layer_types'])}); "
                         "minicb implements full attention only")
    missing = [key for key in REQUIRED_SIZES if key not in raw]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(map(repr, missing))}, which minicb needs to build the model; "
                         "restore the config.json saved with the weights")
    for key in REQUIRED_SIZES:
        if not is_int(raw[key]) or raw[key] < 1:
            raise ValueError(f"{path} has {key}={raw[key]!r}; it must be an integer >= 1")
    num_heads = raw["num_attention_heads"]
    theta, scaling = _rope_settings(raw)
    max_pos = raw.get("max_position_embeddings", 2048)
    window = raw.get("sliding_window") if arch == "MistralForCausalLM" else None
    return ModelConfig(
        architecture=arch,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=raw.get("num_key_value_heads") or num_heads,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // num_heads,
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        max_position_embeddings=max_pos,
        tie_word_embeddings=raw.get("tie_word_embeddings", False),
        qkv_bias=arch == "Qwen2ForCausalLM" or bool(raw.get("attention_bias", False)),
        o_bias=arch != "Qwen2ForCausalLM" and bool(raw.get("attention_bias", False)),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        qk_norm=arch == "Qwen3ForCausalLM",
        rope_theta=theta,
        rope_scaling=scaling,
        eos_token_ids=_eos_ids(raw, folder),
        max_model_len=min(max_pos, window) if window else max_pos,
    )


def rope_inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """One rotation speed per pair of head dimensions (fp32), with llama3 scaling where configured.

    llama3 scaling leaves fast-rotating (short-wavelength) pairs alone, slows the slow ones by
    `factor`, and blends smoothly in between, so a model trained on short contexts reads long ones.
    """
    dim = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  # (hd/2,)
    s = config.rope_scaling
    if s is None:
        return inv
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    in_between = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(in_between, blended, scaled)
