"""The simulator: the engine's scheduling against a step-cost model instead of the network, so lessons run
thousands of requests in seconds with exact, repeatable numbers. A cost model may price another model on
other hardware (minicb.lab.hardware's presets); prompts, tokens and vocabulary stay Bard's."""
from __future__ import annotations

from pathlib import Path

import torch

from minicb.costs import CostModel, StepCost
from minicb.model.config import read_model_config
from minicb.model.loader import resolve_model_path
from minicb.runner.batch import FlatBatch
from minicb.runner.model_runner import RowSampling, load_tokenizer


class SimulatedRunner:
    """A ModelRunner look-alike: the same FlatBatch, a cost model for time, a stand-in for tokens (never EOS:
    max_tokens or stop_token_ids end a request). Its cache holds token ids and the stand-in reads them back,
    so a lost swap copy, a stale block or a wrong slot changes the tokens, as on the real network."""

    def __init__(self, model: str | Path | None = None, cost: CostModel | None = None, num_blocks: int = 512,
                 block_size: int = 16, num_swap_blocks: int = 0):
        self.model_path = resolve_model_path(model)
        self.config = read_model_config(self.model_path)   # shapes and limits only; no weights load
        self.tokenizer = load_tokenizer(self.model_path)  # prompts are encoded; outputs stay token ids
        self.device = torch.device("cpu")
        self.cost = cost or StepCost()
        self.num_blocks, self.block_size, self.num_swap_blocks = num_blocks, block_size, num_swap_blocks
        self.now = 0.0
        eos = list(self.config.eos_token_ids)
        self._allowed = torch.tensor([t for t in range(self.config.vocab_size) if t not in eos])
        # The token id held by each slot; -1 was never written, so reading it changes the stand-in.
        self.kv_tokens = torch.full((num_blocks, block_size), -1, dtype=torch.int64)        # (blocks, bs)
        self.swap_tokens = torch.full((num_swap_blocks, block_size), -1,
                                      dtype=torch.int64)  # (CPU blocks, bs)

    def clock(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        """Idle until t (the next arrival): simulated time does not pass by itself."""
        self.now = max(self.now, t)

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (device block, CPU block) pairs, priced as one copy of their tokens' KV."""
        self._copy(pairs, self.kv_tokens, self.swap_tokens)

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (CPU block, device block) pairs back; a copy costs the same either way."""
        self._copy(pairs, self.swap_tokens, self.kv_tokens)

    def _copy(self, pairs: list[tuple[int, int]], src: torch.Tensor, dst: torch.Tensor) -> None:
        if pairs:
            self.now += self.cost.copy_s(len(pairs) * self.block_size)
            frm, to = (torch.tensor(x) for x in zip(*pairs))
            dst[to] = src[frm]

    def execute(self, batch: FlatBatch, sampling: RowSampling) -> list[int]:
        """Each sampling row's stand-in token, never EOS: a hash of its length and of the token ids it reads
        back from the cache, so with a correct cache it never depends on the batch. Ignores the params."""
        attn = batch.attn
        self.now += self.cost(batch.num_tokens, int(attn.seq_lens.sum()))
        written = attn.slot_mapping >= 0
        self.kv_tokens.view(-1)[attn.slot_mapping[written]] = batch.input_ids[written]
        rows = torch.searchsorted(attn.cu_seqlens_q[1:].long(), batch.logits_indices, right=True)  # (B',)
        seq_lens = attn.seq_lens.long()[rows]                                                     # (B',)
        pos = torch.arange(attn.max_seq_len)                                                      # (S,)
        blocks = attn.block_tables.long()[rows].gather(1, (pos // self.block_size).expand(len(rows), -1))
        read = self.kv_tokens[blocks.clamp(min=0), pos % self.block_size]                         # (B', S)
        visible = pos[None, :] < seq_lens[:, None]
        # Position weights < 2**20 and ids < 2**17 keep the sum far inside int64 at any context length.
        digest = (torch.where(visible, read + 2, 0) * (pos * 40503 % 1048573 + 1)).sum(-1) + seq_lens * 17
        return self._allowed[digest % len(self._allowed)].tolist()
