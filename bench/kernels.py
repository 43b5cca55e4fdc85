"""The Triton kernels measured on a GPU, each against what PyTorch offers, in one run.

    python bench/kernels.py [--out bench/results/kernels.json]      (tools/gpu_check.sh runs this)
    python bench/kernels.py --smoke                                  (tiny shapes on the CPU interpreter:
                                                                      checks the script, measures nothing)

- Paged decode at batch {1, 16, 64} x context {512, 4k, 16k}, head_dim 128, 32 query / 8 KV heads,
  fp16 and bf16: achieved GB/s of K/V read against a measured device-to-device copy, and time against
  torch SDPA over K/V already gathered into contiguous tensors (and with the gather counted).
- Varlen prefill TFLOP/s against SDPA: equal lengths (one batched causal SDPA) and ragged lengths
  (one SDPA per sequence, which is what a ragged batch costs without a varlen kernel).
- End to end: useful tok/s of minicb continuous batching (triton and torch backends) against HF
  transformers' continuous batching on the same GPU, for Bard and a random-init 0.5B-class Qwen2-shaped model.
- A whole decode step of that model at batch 64, per attention backend (triton, torch, flex), against the
  bandwidth roofline: a decode step must read every weight once and every sequence's K/V once, so
  (weight bytes + KV bytes) / copy bandwidth is the fastest it can be; the step's time over that says how
  far the engine is from it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before minicb_kernels defines its kernels

import triton  # noqa: E402
from tqdm import tqdm  # noqa: E402

from minicb import BARD_PATH  # noqa: E402
from minicb.lab.workload import make_workload  # noqa: E402
from minicb_kernels import paged_decode_attention, varlen_attention  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vs_hf import run_hf_continuous, run_minicb  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def seconds(fn) -> float:
    """Median time of fn: CUDA-event timing through triton's do_bench on a GPU, wall clock otherwise."""
    if DEVICE == "cuda":
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def copy_bandwidth(num_bytes: int) -> float:
    """GB/s of a device-to-device copy: every byte read once and written once."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    return 2 * num_bytes / seconds(lambda: dst.copy_(src)) / 1e9


def paged_cache(seq_lens: list[int], num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype,
                seed: int = 0):
    """Random K/V caches holding exactly these sequences in shuffled blocks, their block tables, and
    each token's slot (to gather the same K/V densely for SDPA)."""
    g = torch.Generator().manual_seed(seed)
    blocks = [math.ceil(n / block_size) for n in seq_lens]
    order = torch.randperm(sum(blocks), generator=g)
    tables = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32)
    start = 0
    for i, n in enumerate(blocks):
        tables[i, :n] = order[start:start + n]
        start += n
    shape = (sum(blocks), block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, dtype=dtype, device=DEVICE)
    v_cache = torch.randn(shape, dtype=dtype, device=DEVICE)
    slots = [tables[i, torch.arange(n) // block_size].long() * block_size + torch.arange(n) % block_size
             for i, n in enumerate(seq_lens)]
    return k_cache, v_cache, tables.to(DEVICE), [s.to(DEVICE) for s in slots]


def dense(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """One sequence's K or V gathered from the paged cache into (n_kv, S, hd) for SDPA."""
    return cache.flatten(0, 1).index_select(0, slots).transpose(0, 1)


def bench_decode(batches, contexts, heads, kv_heads, head_dim, block_size, copy_gbps) -> list[dict]:
    rows = []
    grid = [(d, b, c) for d in DTYPES for b in batches for c in contexts]
    for dtype_name, batch, context in tqdm(grid, desc="paged decode"):
        dtype = DTYPES[dtype_name]
        seq_lens = [context] * batch
        k_cache, v_cache, tables, slots = paged_cache(seq_lens, kv_heads, head_dim, block_size, dtype)
        q = torch.randn(batch, heads, head_dim, dtype=dtype, device=DEVICE)
        lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
        scale = head_dim ** -0.5
        kernel = lambda: paged_decode_attention(q, k_cache, v_cache, lens, tables, context, scale)  # noqa: E731
        kv_bytes = 2 * batch * context * kv_heads * head_dim * k_cache.element_size()
        gathered = lambda: (torch.stack([dense(k_cache, s) for s in slots]),  # noqa: E731
                            torch.stack([dense(v_cache, s) for s in slots]))  # (B, n_kv, S, hd) each
        keys, values = gathered()
        sdpa = lambda k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
            q[:, :, None], k, v, scale=scale, enable_gqa=True)[:, :, 0]
        error = (kernel().float() - sdpa(keys, values).float()).abs().max().item()
        t_kernel, t_sdpa = seconds(kernel), seconds(lambda: sdpa(keys, values))
        t_gather_sdpa = seconds(lambda: sdpa(*gathered()))
        gbps = kv_bytes / t_kernel / 1e9
        rows.append({"dtype": dtype_name, "batch": batch, "context": context, "kernel_us": round(t_kernel * 1e6, 1),
                     "kernel_GBps": round(gbps, 1), "fraction_of_copy": round(gbps / copy_gbps, 3),
                     "sdpa_contiguous_us": round(t_sdpa * 1e6, 1), "sdpa_with_gather_us": round(t_gather_sdpa * 1e6, 1),
                     "speedup_vs_sdpa": round(t_sdpa / t_kernel, 2),
                     "speedup_vs_gather_sdpa": round(t_gather_sdpa / t_kernel, 2), "max_abs_diff": error})
    return rows


def bench_prefill(cases: dict[str, list[int]], heads, kv_heads, head_dim, block_size) -> list[dict]:
    rows = []
    grid = [(d, name) for d in DTYPES for name in cases]
    for dtype_name, case in tqdm(grid, desc="varlen prefill"):
        dtype, seq_lens = DTYPES[dtype_name], cases[case]
        k_cache, v_cache, tables, slots = paged_cache(seq_lens, kv_heads, head_dim, block_size, dtype)
        q = torch.randn(sum(seq_lens), heads, head_dim, dtype=dtype, device=DEVICE)
        cu = torch.tensor([0] + seq_lens, device=DEVICE).cumsum(0).to(torch.int32)
        lens = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
        scale = head_dim ** -0.5
        kernel = lambda: varlen_attention(q, k_cache, v_cache, cu, lens, tables, max(seq_lens), scale)  # noqa: E731
        keys = [dense(k_cache, s) for s in slots]
        values = [dense(v_cache, s) for s in slots]
        queries = [q[a:b].transpose(0, 1) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
        attend = lambda qq, k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
            qq, k, v, is_causal=True, scale=scale, enable_gqa=True)
        if len(set(seq_lens)) == 1:   # equal lengths: one batched SDPA call, its best case
            qb, kb, vb = torch.stack(queries), torch.stack(keys), torch.stack(values)
            sdpa = lambda: attend(qb, kb, vb)  # noqa: E731
        else:
            sdpa = lambda: [attend(qq, k, v) for qq, k, v in zip(queries, keys, values)]  # noqa: E731
        want = torch.cat([attend(qq, k, v).transpose(0, 1) for qq, k, v in zip(queries, keys, values)])
        error = (kernel().float() - want.float()).abs().max().item()
        flops = sum(4 * heads * head_dim * n * (n + 1) / 2 for n in seq_lens)   # QK^T and PV, causal half
        t_kernel, t_sdpa = seconds(kernel), seconds(sdpa)
        rows.append({"dtype": dtype_name, "case": case, "tokens": sum(seq_lens),
                     "kernel_TFLOPs": round(flops / t_kernel / 1e12, 2), "sdpa_TFLOPs": round(flops / t_sdpa / 1e12, 2),
                     "speedup_vs_sdpa": round(t_sdpa / t_kernel, 2), "max_abs_diff": error})
    return rows


def random_qwen2(folder: Path, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int) -> Path:
    """A random-init Qwen2-shaped checkpoint (biases on q/k/v) with Bard's tokenizer: the size of a real
    model's body, no hub needed."""
    import shutil

    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=2048, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=intermediate, max_position_embeddings=32768,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BARD_PATH / name, folder / name)
    return folder


def bench_decode_roofline(path: Path, batch: int, context: int, dtype: str, copy_gbps: float) -> list[dict]:
    """One decode step of `batch` sequences of `context` tokens, per attention backend, against the time
    to move its unavoidable bytes (every weight, every sequence's K/V) at the measured copy bandwidth."""
    from minicb.runner.batch import SequenceChunk
    from minicb.runner.batch_builder import build_flat_batch
    from minicb.runner.model_runner import ModelRunner

    rows = []
    for backend in ("triton", "torch", "flex"):   # flex: FlexAttention's Triton kernel, compiled on the first step
        blocks_per_seq = -(-context // 16)
        runner = ModelRunner(path, device=DEVICE, dtype=dtype, num_blocks=batch * blocks_per_seq, block_size=16,
                             attn_backend=backend, max_num_seqs=batch)
        chunks = [SequenceChunk([1], context - 1, list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)))
                  for i in range(batch)]
        step = build_flat_batch(chunks, 16, runner.device)
        c = runner.config
        weight_bytes = sum(p.numel() * p.element_size() for p in runner.model.parameters())   # tied: counted once
        kv_bytes = batch * context * c.num_layers * 2 * c.kv_dim * runner.kv_cache.element_size()
        measured = seconds(lambda: runner.logits(step))
        roofline = (weight_bytes + kv_bytes) / (copy_gbps * 1e9)
        rows.append({"backend": runner.attn_backend, "batch": batch, "context": context, "dtype": dtype,
                     "weight_MB": round(weight_bytes / 1e6, 1), "kv_MB": round(kv_bytes / 1e6, 1),
                     "step_ms": round(measured * 1e3, 3), "roofline_ms": round(roofline * 1e3, 3),
                     "of_roofline": round(roofline / measured, 3)})
    return rows


def bench_end_to_end(models: dict[str, Path], requests: int, seats: int, dtype: str) -> list[dict]:
    from transformers import AutoTokenizer

    work = make_workload(requests, lengths="heavy", seed=0, max_tokens=256)
    tok = AutoTokenizer.from_pretrained(str(BARD_PATH))
    prompts = [tok(w.prompt)["input_ids"] for w in work]
    lengths = [w.params.max_tokens for w in work]
    rows = []
    for name, path in tqdm(models.items(), desc="end to end"):
        runs = {"minicb triton": run_minicb(prompts, lengths, seats, path, DEVICE, dtype, "triton"),
                "minicb torch": run_minicb(prompts, lengths, seats, path, DEVICE, dtype, "torch"),
                "HF continuous batching": run_hf_continuous(prompts, lengths, seats, path, DEVICE, dtype)}
        for engine, (wall, _) in runs.items():
            rows.append({"model": name, "engine": engine, "requests": requests, "seats": seats,
                         "useful_tokens": sum(lengths), "wall_s": round(wall, 2),
                         "useful_tok_per_s": round(sum(lengths) / wall, 1)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench/results/kernels.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, CPU allowed: checks the script runs")
    args = ap.parse_args()
    if DEVICE != "cuda" and not args.smoke:
        sys.exit("bench/kernels.py measures GPU kernels and torch sees no GPU; use --smoke to check the script "
                 "on the CPU interpreter")

    env = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else platform.processor() or "cpu",
           "torch": torch.__version__, "triton": triton.__version__, "interpreted": DEVICE != "cuda"}
    import transformers
    env["transformers"] = transformers.__version__
    if args.smoke:
        shapes = dict(heads=4, kv_heads=2, head_dim=32, block_size=16)
        batches, contexts, copy_bytes = [1, 2], [64, 96], 1 << 20
        prefill_cases = {"equal 2x64": [64, 64], "ragged": [17, 64, 33]}
        qwen = dict(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256)
        requests, seats, e2e_dtype = 4, 2, "float32"
        roofline_batch, roofline_context = 2, 64
    else:
        shapes = dict(heads=32, kv_heads=8, head_dim=128, block_size=16)
        batches, contexts, copy_bytes = [1, 16, 64], [512, 4096, 16384], 2 << 30
        rng = torch.Generator().manual_seed(0)
        prefill_cases = {"equal 8x2048": [2048] * 8,
                         "ragged 16 in 64..4096": torch.randint(64, 4097, (16,), generator=rng).tolist()}
        qwen = dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864)   # Qwen2.5-0.5B's body
        requests, seats, e2e_dtype = 256, 64, "bfloat16"
        roofline_batch, roofline_context = 64, 4096

    copy_gbps = copy_bandwidth(copy_bytes)
    print(f"{env}\ndevice-to-device copy: {copy_gbps:.0f} GB/s", flush=True)
    decode = bench_decode(batches, contexts, copy_gbps=copy_gbps, **shapes)
    prefill = bench_prefill(prefill_cases, **shapes)
    with tempfile.TemporaryDirectory() as tmp:
        qwen_name = "random qwen2 " + "x".join(map(str, qwen.values()))
        models = {"bard": BARD_PATH, qwen_name: random_qwen2(Path(tmp), **qwen)}
        end_to_end = bench_end_to_end(models, requests, seats, e2e_dtype)
        roofline = bench_decode_roofline(models[qwen_name], roofline_batch, roofline_context, e2e_dtype, copy_gbps)

    for title, rows in (("paged decode", decode), ("varlen prefill", prefill), ("end to end", end_to_end),
                        (f"{qwen_name}: a decode step against the bandwidth roofline", roofline)):
        print(f"\n{title}")
        for row in rows:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"env": env, "copy_GBps": round(copy_gbps, 1), "decode": decode,
                                    "prefill": prefill, "end_to_end": end_to_end, "decode_step_roofline": roofline},
                                   indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
