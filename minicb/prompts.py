"""From what a caller passes to token ids, with a clear error for anything the model cannot serve."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Union

from minicb.checks import is_int
from minicb.model.loader import BARD_PATH
from minicb.sampling import SamplingParams

Prompt = Union[str, list[int], dict]


def prompt_of_dict(prompt: dict) -> str | list[int]:
    """vLLM's prompt dicts: {"prompt": text} or {"prompt_token_ids": ids}."""
    keys = set(prompt) & {"prompt", "prompt_token_ids"}
    if len(keys) != 1:
        raise ValueError(f"a prompt dict needs exactly one of 'prompt' (text) or 'prompt_token_ids', got "
                         f"keys {sorted(prompt)}")
    return prompt[keys.pop()]


def prompt_text(prompt: Prompt) -> str | None:
    """The prompt's text; None when it was given as token ids."""
    if isinstance(prompt, dict):
        prompt = prompt_of_dict(prompt)
    return prompt if isinstance(prompt, str) else None


def check_unicode(text: str) -> None:
    """A lone surrogate (what undecodable bytes become under errors='surrogateescape') is not text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"the prompt is not valid Unicode text: {text[err.start]!r} at index {err.start} "
                         "is a lone surrogate (undecodable bytes); decode the input with errors='replace', "
                         "or remove it") from None


def encode_prompt(prompt: Prompt, tokenizer: Any, vocab_size: int, max_model_len: int, model_path: Path,
                  too_long_fix: str = "shorten the prompt") -> list[int]:
    """Checked token ids for a prompt. too_long_fix: the advice for a prompt over max_model_len."""
    if isinstance(prompt, dict):
        prompt = prompt_of_dict(prompt)
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError(f"{model_path} has no tokenizer files; pass prompts as token-id lists")
        check_unicode(prompt)
        # verbose=False: the length check below names the engine's limit and the fix; the tokenizer's
        # model_max_length warning would only repeat it, less usefully.
        ids = tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"]
    elif isinstance(prompt, list):
        ids = prompt
    else:
        raise ValueError(f"a prompt of type {type(prompt).__name__} cannot be served; give a string, a list "
                         "of token ids (a tensor or array: .tolist()), or a dict with 'prompt' or "
                         "'prompt_token_ids'")
    if not ids:
        example = (" (for Bard, a speaker line such as 'ROMEO.\\n')"
                   if Path(model_path).resolve() == BARD_PATH else "")
        raise ValueError(f"the prompt is empty; give at least one token{example}")
    if any(not is_int(t) or not 0 <= t < vocab_size for t in ids):
        raise ValueError(f"prompt token ids must be Python integers in [0, {vocab_size})")
    if len(ids) >= max_model_len:
        raise ValueError(f"the prompt has {len(ids)} tokens but the engine serves at most {max_model_len} "
                         f"(max_model_len), prompt and output together; {too_long_fix}")
    return list(ids)


def check_params_and_priority(params: SamplingParams | None, priority: int, policy: str) -> SamplingParams:
    """params, or the defaults for None. ValueError for a wrong type or a priority the policy would ignore."""
    if params is None:
        params = SamplingParams()
    elif not isinstance(params, SamplingParams):
        raise ValueError(f"sampling params must be a SamplingParams, not {type(params).__name__}; "
                         "for a dict d, pass SamplingParams(**d)")
    if not is_int(priority):
        raise ValueError(f"priority={priority!r} is invalid: use an integer (lower is served first)")
    if priority != 0 and policy != "priority":
        raise ValueError(f"priority={priority} has no effect under scheduling_policy={policy!r}; "
                         "set scheduling_policy='priority', or leave it 0")
    return params
