"""Load a Hugging Face checkpoint (a local folder, a hub id through the hub's cache, a GGUF file converted once
into a folder, or a fetched model's name such as "smollm2") into minicb's own CausalLM, from safetensors."""
from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open

from minicb.model.config import ModelConfig, read_model_config
from minicb.model.fetch import REAL_MODELS, find_real_model
from minicb.model.gguf import gguf_folder, is_gguf
from minicb.model.llama import FUSED_PROJECTIONS, CausalLM, RotaryEmbedding

BARD_PATH = Path(__file__).resolve().parent.parent / "assets" / "bard"


# What snapshot_download fetches of a hub repository: what load_model and load_tokenizer read, not the
# .bin/.pt/.gguf copies of the weights that many repositories also hold.
HUB_FILES = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "added_tokens.json",
             "vocab.json", "vocab.txt", "merges.txt", "*.model", "*.tiktoken", "chat_template.json",
             "chat_template.jinja", "additional_chat_templates/*", "*.safetensors", "model.safetensors.index.json"]
# "org/name" or "org/name@revision", as the hub spells them: no "./", "~" or absolute path.
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")


def resolve_model_path(model: str | Path | None) -> Path:
    """None means the shipped Bard model. A local folder wins, then a GGUF file (its converted folder, made on
    first use: minicb/model/gguf.py), then the name of a fetched model (minicb/model/fetch.py); otherwise a Hugging
    Face hub id ("org/name", or "org/name@revision") resolves through huggingface_hub: its local cache first,
    then a download where the network allows (HF_HUB_OFFLINE=1 forbids one; HF_HOME / HF_HUB_CACHE say where
    the cache is)."""
    path = BARD_PATH if model is None else Path(model).expanduser()
    if path.is_file():
        if is_gguf(path):
            return gguf_folder(path)
        guess = f" ({str(path.parent)!r} here)" if (path.parent / "config.json").is_file() else ""
        raise NotADirectoryError(
            f"model path {str(path)!r} is a file, not a folder: pass the folder that holds config.json and "
            f"*.safetensors{guess}, or a .gguf file")
    if path.is_dir():
        return path
    if isinstance(model, str) and model in REAL_MODELS:
        return find_real_model(model)
    if path.suffix.lower() == ".gguf":
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist: check the path (relative paths start "
                                f"from {str(Path.cwd())!r})")
    hub_id = HUB_ID.fullmatch(model) if isinstance(model, str) else None
    if hub_id is None:
        raise FileNotFoundError(
            f"model folder {str(path)!r} does not exist: pass a local folder holding config.json and "
            "*.safetensors, a .gguf file, a Hugging Face hub id such as 'Qwen/Qwen3-0.6B', a fetched model's name ("
            f"{', '.join(map(repr, REAL_MODELS))}: make real-model), or omit the model to use the shipped Bard model")
    return _from_hub(hub_id["repo"], hub_id["revision"])


def _from_hub(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RevisionNotFoundError

    name = repo_id + (f"@{revision}" if revision else "")
    fixes = (f"run `hf download {repo_id}` on a machine with access to the hub (and copy its "
             "cache, ~/.cache/huggingface/hub, or HF_HUB_CACHE, here), or pass a local folder holding config.json "
             "and *.safetensors")
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_FILES))
    except RevisionNotFoundError as err:
        raise FileNotFoundError(f"model {name!r}: the hub has no revision {revision!r} of {repo_id!r}; use a "
                                f"branch, tag or commit of it, or drop '@{revision}' ({err})") from None
    except LocalEntryNotFoundError:
        why = ("HF_HUB_OFFLINE=1 forbids a download: set HF_HUB_OFFLINE=0 where the network reaches the hub, or "
               if constants.HF_HUB_OFFLINE else "the hub could not be reached: ")
        raise FileNotFoundError(f"model {name!r} is neither a local folder nor in the hub cache, and {why}{fixes}"
                                ) from None
    except HfHubHTTPError as err:   # the repository does not exist, is gated or private (401, 403, 404)
        raise FileNotFoundError(
            f"model {name!r} is neither a local folder nor a hub repository this machine may read: check the "
            f"spelling (org/name), accept the model's licence on its hub page and log in (`hf auth "
            f"login`, or HF_TOKEN) if it is gated, or {fixes.removeprefix('run ')} ({err})") from None


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


def _checkpoint_names(name: str) -> list[str]:
    """The checkpoint tensors that make our parameter `name`: several for a fused projection, else itself."""
    for fused, separate in FUSED_PROJECTIONS.items():
        if f".{fused}." in name:
            return [name.replace(fused, part) for part in separate]
    return [name]


def _check_shape(name: str, shape: tuple[int, ...], opened: dict, folder: Path) -> None:
    """Before reading any data: the checkpoint's tensors for parameter `name` must make `shape` (stacked by rows
    for a fused projection), else the weights and config.json disagree."""
    parts = _checkpoint_names(name)
    found = [tuple(opened[part][1].get_slice(part).get_shape()) for part in parts]
    if len({s[1:] for s in found}) == 1 and (sum(s[0] for s in found), *found[0][1:]) == shape:
        return
    if len(parts) == 1:
        what = f"tensor {name!r} in {opened[name][0]} has shape {list(found[0])}"
    else:
        what = (f"tensors {', '.join(map(repr, parts))} in {opened[parts[0]][0]} have shapes "
                f"{', '.join(str(list(s)) for s in found)}, stacked into {name!r},")
    raise ValueError(f"{what} but {folder / 'config.json'} implies {list(shape)}: the weights and config.json "
                     "come from different models; use the config.json saved with these weights")


def load_model(model: str | Path | None = None, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> tuple[CausalLM, ModelConfig]:
    folder = resolve_model_path(model)
    config = read_model_config(folder)
    with torch.device("meta"):
        lm = CausalLM(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in lm.state_dict().items()}   # meta: shapes, no data
    if config.tie_word_embeddings:
        del shapes["lm_head.weight"]
    with ExitStack() as stack:
        opened = {}   # checkpoint tensor name -> (its file, the open file)
        for file in _checkpoint_files(folder):
            f = stack.enter_context(safe_open(str(file), framework="pt"))
            opened.update((name, (file, f)) for name in f.keys())   # noqa: SIM118 (safe_open is not iterable)
        missing = sorted(part for name in shapes for part in _checkpoint_names(name) if part not in opened)
        if missing:
            raise ValueError(f"checkpoint in {folder} lacks {len(missing)} weights minicb needs, "
                             f"e.g. {missing[:3]}; is config.json from the same model?")
        for name, shape in shapes.items():
            _check_shape(name, shape, opened, folder)
        tensors = {}
        for name in shapes:
            parts = [opened[part][1].get_tensor(part).to(dtype) for part in _checkpoint_names(name)]
            tensors[name] = torch.cat(parts) if len(parts) > 1 else parts[0]
    lm.load_state_dict(tensors, strict=False, assign=True)
    if config.tie_word_embeddings:
        lm.lm_head.weight = lm.model.embed_tokens.weight
    lm.rotary = RotaryEmbedding(config)  # its buffer was built on meta, without values
    return lm.to(device).eval(), config
