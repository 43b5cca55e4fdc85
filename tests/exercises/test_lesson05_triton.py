"""Lesson 05's task, graded on the implementation MINICB_IMPL picks (make test: the solutions). On a
CPU the kernel runs under TRITON_INTERPRET=1, which tests/conftest.py sets before any kernel exists.

The reference is attention in plain PyTorch: each context gathered through its block table (minicb's
torch backend's gather_context) and fed to SDPA in float64. Each rule of the contract has its own small
decode step, built so that a kernel which breaks that rule (and only that one) is wrong there: the rule
is what the failure names. Then random steps over every shape at once, and Bard decoding with your
kernel past a tile's end, every call checked at the seam."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from grading import obeying
from hypothesis import given, settings
from hypothesis import strategies as st
from minicb_kernels.tiles import tile_sizes
from test_kernels import DEVICE, TOLERANCE

from minicb import course
from minicb.attention.torch_backend import gather_context
from minicb.llm import LLM
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson05_triton")
Kernel = Callable[..., torch.Tensor]

ATTENTION_RULE = "each query head's output is softmax(scale * q . k) v over its sequence's context"
CONTEXT_END_RULE = "keys at positions >= seq_len count for nothing"
# Which half a kernel broke shows in its output: a stale row read gives NaN, a key with weight a wrong number.
UNREAD_RULE = (f"{CONTEXT_END_RULE}: their rows are never read (the cache past a context holds stale values, NaN "
               "here, and NaN reached your output)")
NO_WEIGHT_RULE = (f"{CONTEXT_END_RULE}: they get no weight in the softmax (a key read as 0.0 still scores 0, and "
                  "exp(0 - max) is not zero)")
RESCALE_RULE = ("the online softmax must rescale the running sum and the accumulated values when a tile raises "
                "the running max")
LARGE_SCORES_RULE = "scores far beyond exp's range (a hundred and more) give the exact softmax, finite"
PAGED_RULE = "position p is read from the sequence's own blocks, in its block table's order"
GQA_RULE = "query head h reads KV head h // (H / n_kv) (GQA)"
BATCH_RULE = "each sequence attends over its own context: seq_lens[b] positions through block_tables[b]"
HEAD_DIM_RULE = "columns past head_dim are neither read nor written (head_dim padded up to a power of two)"


def tile(head_dim: int, dtype: torch.dtype = torch.float32) -> int:
    """The keys per tile (BLOCK_N) the launch picks for this head_dim."""
    return tile_sizes(head_dim, dtype)[1]


@dataclass
class DecodeStep:
    """One decode step over a paged cache: B sequences, one query each. Blocks are shuffled over the
    pool, every slot outside a context is NaN (stale), and so are a block before and after the pool, where
    a table's -1 or a read past the pool's end would land. rising_scores adds p / 2 to the score of the key
    at position p (for the first query head of each KV head), so every tile raises the running max;
    query_scale scales the queries, and so the scores."""
    seq_lens: list[int]
    num_heads: int = 1
    num_kv_heads: int = 1
    head_dim: int = 128
    block_size: int = 32
    dtype: torch.dtype = torch.float32
    seed: int = 0
    rising_scores: bool = False
    query_scale: float = 1.0

    def __post_init__(self):
        g = torch.Generator().manual_seed(self.seed)
        self.scale = self.head_dim ** -0.5
        bs, n_kv, group = self.block_size, self.num_kv_heads, self.num_heads // self.num_kv_heads
        blocks_per_seq = [math.ceil(n / bs) for n in self.seq_lens]
        num_blocks = sum(blocks_per_seq) + 2
        order = torch.randperm(num_blocks, generator=g).tolist()
        # Wide enough that every tile's positions, past the context's end too, have an entry (-1) to read.
        width = max(math.ceil(math.ceil(n / tile(self.head_dim)) * tile(self.head_dim) / bs) for n in self.seq_lens)
        self.block_tables = torch.full((len(self.seq_lens), width + 1), -1, dtype=torch.int32)
        for b, n in enumerate(blocks_per_seq):
            self.block_tables[b, :n] = torch.tensor([order.pop() for _ in range(n)])
        self.q = torch.randn(len(self.seq_lens), self.num_heads, self.head_dim, generator=g) * self.query_scale
        shape = (num_blocks, bs, n_kv, self.head_dim)
        k, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        in_context = torch.zeros(num_blocks * bs, dtype=torch.bool)
        for b, n in enumerate(self.seq_lens):
            positions = torch.arange(n)
            slots = self.block_tables[b, positions // bs].long() * bs + positions % bs
            in_context[slots] = True
            if self.rising_scores:   # score of the key at p: its random part + p / 2, for each KV head's first query
                first = self.q[b, ::group]                                             # (n_kv, hd)
                towards_q = first / (self.scale * first.square().sum(-1, keepdim=True))
                k.flatten(0, 1)[slots] += 0.5 * positions[:, None, None] * towards_q
        k.flatten(0, 1)[~in_context] = float("nan")
        v.flatten(0, 1)[~in_context] = float("nan")
        self.k_cache, self.v_cache = self.inside_stale_margins(k), self.inside_stale_margins(v)
        self.q = self.q.to(self.dtype)

    def inside_stale_margins(self, cache: torch.Tensor) -> torch.Tensor:
        """cache, as a view into a buffer with one NaN block on each side of it."""
        buffer = torch.full((cache.shape[0] + 2, *cache.shape[1:]), float("nan"), dtype=self.dtype, device=DEVICE)
        buffer[1:-1] = cache.to(self.dtype)
        return buffer[1:-1]

    def describe(self) -> str:
        def count(n: int, what: str) -> str:
            return f"{n} {what}{'s' * (n != 1)}"
        tiles = tile(self.head_dim)
        contexts = ", ".join(f"{n} ({count(math.ceil(n / tiles), 'tile')})" for n in self.seq_lens)
        extra = ", each key scoring above the one before it" * self.rising_scores
        if self.query_scale != 1:
            extra += f", scores up to {self.largest_score():.0f}"
        return (f"context{'s' * (len(self.seq_lens) > 1)} {contexts} over tiles of {tiles}, "
                f"{count(self.num_heads, 'query head')} over {count(self.num_kv_heads, 'KV head')}, head_dim "
                f"{self.head_dim}, blocks of {self.block_size} (shuffled), {self.dtype}{extra}")

    def contexts(self, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequence b's query (H, 1, hd), keys and values (n_kv, seq_len, hd), float64, read through its table."""
        keys, values = (gather_context(cache.cpu().double(), self.block_tables[b].cpu(), self.seq_lens[b])
                        for cache in (self.k_cache, self.v_cache))
        return self.q[b].cpu().double()[:, None], keys.transpose(0, 1), values.transpose(0, 1)

    def largest_score(self) -> float:
        group = self.num_heads // self.num_kv_heads
        scores = [(query * keys.repeat_interleave(group, 0)).sum(-1).abs().max() * self.scale
                  for query, keys, _ in map(self.contexts, range(len(self.seq_lens)))]
        return float(max(scores))

    def reference(self) -> torch.Tensor:
        """(B, H, hd) float64: SDPA over each sequence's gathered context."""
        return torch.stack([F.scaled_dot_product_attention(query, keys, values, scale=self.scale, enable_gqa=True)[:, 0]
                            for query, keys, values in map(self.contexts, range(len(self.seq_lens)))])

    def run(self, kernel: Kernel) -> torch.Tensor:
        seq_lens = torch.tensor(self.seq_lens, dtype=torch.int32, device=DEVICE)
        return obeying(f"paged_decode_attention runs on any valid decode step ({self.describe()})", kernel,
                       self.q.to(DEVICE), self.k_cache, self.v_cache, seq_lens, self.block_tables.to(DEVICE),
                       max(self.seq_lens), self.scale)


def check_output(rule: str, step: DecodeStep, out, tolerance: dict | None = None) -> None:
    """out is step's attention to tolerance; if not, the failure names the rule, the step, and the worst
    (sequence, head)s."""
    where = f"paged_decode_attention: {rule}: {step.describe()}"
    want_shape = tuple(step.q.shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want_shape or out.dtype != step.dtype:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        pytest.fail(f"{where}: the output is (B, H, head_dim) {want_shape} in q's dtype {step.dtype}; got {got}",
                    pytrace=False)
    want = step.reference()
    error = (out.cpu().double() - want).abs()
    tolerance = tolerance or TOLERANCE[step.dtype]
    bad = ~(error <= tolerance["atol"] + tolerance["rtol"] * want.abs())         # NaN counts as bad
    if not bad.any():
        return
    worst = error.nan_to_num(float("inf")).amax(-1)                              # (B, H)
    heads = bad.any(-1).nonzero().tolist()
    shown = "; ".join(f"sequence {b} head {h}: {'NaN' if error[b, h].isnan().any() else f'{worst[b, h]:.1e}'}"
                      for b, h in heads[:6])
    more = f" (and {len(heads) - 6} more)" if len(heads) > 6 else ""
    pytest.fail(f"{where}: {len(heads)} of {bad.shape[0] * bad.shape[1]} (sequence, head) outputs differ from "
                f"attention in PyTorch by more than rtol {tolerance['rtol']:.0e}, atol {tolerance['atol']:.0e}: "
                f"{shown}{more}", pytrace=False)


def check_one_tile(kernel: Kernel) -> None:
    step = DecodeStep([tile(128)], head_dim=128, block_size=tile(128))
    check_output(ATTENTION_RULE, step, step.run(kernel))


def check_context_end(kernel: Kernel) -> None:
    """One tile that runs past the context, inside one block whose other rows are stale."""
    step = DecodeStep([tile(128) // 2 + 3], head_dim=128, block_size=2 * tile(128), seed=1)
    out = step.run(kernel)
    read_stale = isinstance(out, torch.Tensor) and bool(out.isnan().any())
    check_output(UNREAD_RULE if read_stale else NO_WEIGHT_RULE, step, out)


def check_rescale(kernel: Kernel) -> None:
    """Every tile raises the running max: old sums kept at the old max's scale are wrong by far."""
    step = DecodeStep([3 * tile(256) + 8], head_dim=256, block_size=tile(256), rising_scores=True, seed=2)
    check_output(RESCALE_RULE, step, step.run(kernel))


def check_large_scores(kernel: Kernel) -> None:
    """exp overflows fp32 past 88: only a softmax that subtracts the max stays finite. Scores of 200 round to
    fp32 with an absolute error of about 1e-5 or more, which the softmax turns into a relative one: hence 1e-3."""
    step = DecodeStep([2 * tile(128) - 5], head_dim=128, block_size=16, query_scale=100.0, seed=3)
    check_output(LARGE_SCORES_RULE, step, step.run(kernel), tolerance=dict(rtol=1e-3, atol=1e-4))


def check_paged(kernel: Kernel) -> None:
    """Blocks shorter than a tile (8 to a tile) and longer than one (2 tiles to a block)."""
    for seed, block_size in enumerate([tile(128) // 8, 2 * tile(128)], start=4):
        step = DecodeStep([3 * tile(128) + 5], head_dim=128, block_size=block_size, seed=seed)
        check_output(PAGED_RULE, step, step.run(kernel))


def check_gqa(kernel: Kernel) -> None:
    for seed, (heads, kv_heads) in enumerate([(8, 2), (8, 1), (4, 4)], start=6):
        step = DecodeStep([tile(128) + 7], heads, kv_heads, head_dim=128, block_size=16, seed=seed)
        check_output(GQA_RULE, step, step.run(kernel))


def check_batch(kernel: Kernel) -> None:
    step = DecodeStep([1, 2 * tile(128) + 1, tile(128) - 1], 2, 2, head_dim=128, block_size=16, seed=9)
    check_output(BATCH_RULE, step, step.run(kernel))


def check_head_dim(kernel: Kernel) -> None:
    step = DecodeStep([tile(80) + 9, 20], 4, 2, head_dim=80, block_size=16, seed=10)
    check_output(HEAD_DIM_RULE, step, step.run(kernel))


@st.composite
def decode_steps(draw) -> DecodeStep:
    """Every shape at once: 1 to 3 sequences from 1 to 3 tiles and a bit, GQA 1/2/4 over 1 or 2 KV heads,
    head_dim 32 to 256 (80: padded), blocks of 4 to 32, fp32 and fp16."""
    head_dim = draw(st.sampled_from([32, 80, 128, 256]))
    lengths = st.one_of(st.integers(1, 3 * tile(head_dim) + 5), st.sampled_from([tile(head_dim), tile(head_dim) + 1]))
    kv_heads, group = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4]))
    return DecodeStep(draw(st.lists(lengths, min_size=1, max_size=3)), kv_heads * group, kv_heads, head_dim,
                      draw(st.sampled_from([4, 16, 32])), draw(st.sampled_from([torch.float32, torch.float16])),
                      seed=draw(st.integers(0, 2**16)))


def check_random_steps(kernel: Kernel, max_examples: int = 20) -> None:
    @settings(max_examples=max_examples, deadline=None, report_multiple_bugs=False)
    @given(step=decode_steps())
    def matches_attention(step):
        check_output(ATTENTION_RULE, step, step.run(kernel))

    matches_attention()


def checked_at_the_seam(kernel: Kernel) -> Kernel:
    """kernel, with each of the engine's calls checked against attention in PyTorch on that call's inputs."""
    def decode_and_check(q, k_cache, v_cache, seq_lens, block_tables, max_seq_len, scale, num_splits=None):
        out = obeying("paged_decode_attention runs on the engine's decode steps", kernel, q, k_cache, v_cache,
                      seq_lens, block_tables, max_seq_len, scale)
        step = EngineDecodeStep(q, k_cache, v_cache, seq_lens, block_tables, scale)
        check_output(ATTENTION_RULE + ", on the engine's decode step", step, out)
        return out
    return decode_and_check


class EngineDecodeStep(DecodeStep):
    """A decode step as the engine hands it to the kernel: its tensors, not drawn ones."""

    def __init__(self, q, k_cache, v_cache, seq_lens, block_tables, scale):
        self.q, self.k_cache, self.v_cache, self.block_tables, self.scale = q, k_cache, v_cache, block_tables, scale
        self.seq_lens, self.dtype = seq_lens.tolist(), q.dtype
        self.num_heads, self.num_kv_heads, self.head_dim = q.shape[1], k_cache.shape[2], q.shape[2]
        self.block_size, self.rising_scores, self.query_scale = k_cache.shape[1], False, 1.0

    def describe(self) -> str:
        return "Bard's " + super().describe().replace(" (shuffled)", "")


# Bard's head_dim is 32, so a tile holds 64 keys. This prompt is 62 tokens: its decode steps read contexts of
# 63, 64 and 65, inside one tile, exactly one, and one key into a second.
LONG_PROMPT = ("ROMEO.\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
               "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief, that thou")


def check_bard_decodes(kernel: Kernel) -> None:
    """Bard on the triton backend with kernel for decode generates what it generates with minicb's."""
    prompts = [LONG_PROMPT, "JULIET.\nO Romeo,"]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (4, 3)]
    # preemption_mode: "auto" would time prefills of up to the whole pool to price a swap, slow under the interpreter.
    config = dict(device=DEVICE, dtype="float32", attn_backend="triton", max_num_seqs=2, num_blocks=16,
                  preemption_mode="recompute")
    yours = LLM(None, parts=EngineParts(paged_decode_attention=checked_at_the_seam(kernel)), **config)
    reference = LLM(None, **config)
    got = [o.outputs[0].token_ids for o in yours.generate(prompts, params, use_tqdm=False)]
    want = [o.outputs[0].token_ids for o in reference.generate(prompts, params, use_tqdm=False)]
    assert got == want, "Bard with your decode kernel generates what it generates with minicb's"


@pytest.mark.parametrize("check", [check_one_tile, check_context_end, check_rescale, check_large_scores,
                                   check_paged, check_gqa, check_batch, check_head_dim],
                         ids=lambda check: check.__name__.removeprefix("check_"))
def test_lesson05_task1_rule(check):
    check(mine.paged_decode_attention)


def test_lesson05_task1_matches_attention_on_random_steps():
    check_random_steps(mine.paged_decode_attention)


def test_lesson05_task1_bard_decodes_with_your_kernel():
    check_bard_decodes(mine.paged_decode_attention)
