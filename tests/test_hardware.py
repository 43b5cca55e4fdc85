"""Hardware presets: the CPU's fitted StepCost and the GPU roofline, both as the simulator's clock.

What the GPU preset must show, from its stated assumptions (minicb/lab/hardware.py): a decode step
costs about the same at any batch size, so continuous batching gains tens of times over static
batching where on this CPU it gains little; and where "auto" preemption turns from recomputing to
swapping moves the right way with the host link and the compute.
"""
from __future__ import annotations

import pytest

from minicb.config import EngineConfig
from minicb.costs import CostModel, PreemptionCost, StepCost, simulated_preemption_cost
from minicb.engine import LLMEngine
from minicb.lab.hardware import (H100_SXM, LLAMA3_8B, PRESETS, ModelShape, RooflineAssumptions, RooflineCost,
                             crossover_table, loaded_throughput)
from minicb.lab.workload import make_workload, run_workload
from minicb.runner.simulator import SimulatedRunner

CPU, H100, H200 = PRESETS.values()


def test_presets_say_what_they_are():
    assert list(PRESETS)[0] == CPU.name == "this CPU: Bard (measured)"
    assert not CPU.modelled and CPU.step_cost == StepCost() and CPU.num_blocks == 5461   # 256 MiB of fp32 KV
    for gpu in (H100, H200):
        assert gpu.modelled and "(modelled)" in gpu.name and gpu.notes.startswith("Modelled, not measured.")
        assert "128 KiB of KV per token" in gpu.notes and "only the clock is the 8B model's" in gpu.notes
        assert gpu.block_size == 16 and isinstance(gpu.step_cost, CostModel)
    # 0.9 x 80 GB, less 16.06 GB of weights and 4 GB of headroom, at 128 KiB x 16 tokens a block.
    assert H100.num_blocks == 24_766 and H200.num_blocks > 2 * H100.num_blocks


def test_llama3_8b_shapes_count_as_published():
    assert LLAMA3_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert LLAMA3_8B.weight_bytes == 2 * 8_030_261_248                     # Llama-3-8B's parameters, in bf16
    assert LLAMA3_8B.streamed_params == 8_030_261_248 - 128256 * 4096     # less the input embedding


@pytest.mark.parametrize("context", [16, 512])
def test_a_decode_step_is_flat_in_batch_size_on_the_gpu_only(context):
    """A GPU decode step streams every weight whatever the batch; a CPU step costs about its tokens."""
    for gpu in (H100, H200):
        assert gpu.step_cost(64, 64 * context) / gpu.step_cost(1, context) < 1.5
    assert CPU.step_cost(64, 64 * context) / CPU.step_cost(1, context) > 5


def test_continuous_batching_gains_tens_of_times_on_the_gpu_and_little_on_the_cpu():
    """Static batching holds a batch until its longest member ends: with heavy-tailed lengths most of
    its steps run a few requests. On the GPU such a step costs nearly what a full one does (decode is
    flat in batch size up to ~220 sequences, where the step turns compute-bound), so continuous
    batching, which keeps every seat busy, gains about the ratio of a batch's longest output to the
    mean one. On this CPU a step costs about its tokens, and the gain is small. 192 seats: a large
    batch that is still memory-bound. The gain rides on each static batch's longest draw: over seeds
    0-11 these settings give 9.4 to 15.8 on the H100 (median 12.7) and 1.4 to 1.8 on the CPU
    (median 1.65; bench/gpu_presets.py); seed 4, 12.1 and 1.6, is a draw near the median."""
    work = make_workload(4 * 192, lengths="heavy", max_tokens=1000, seed=4)   # 3 static batches while loaded
    gain = {p.name: loaded_throughput(p, "continuous", work, 192) / loaded_throughput(p, "static", work, 192)
            for p in (CPU, H100)}
    assert gain[H100.name] >= 10, gain
    assert gain[CPU.name] < 3, gain


def test_crossover_moves_with_the_link_and_the_compute():
    rows = crossover_table(H100.step_cost)
    table = {(r["peak_tflops"], r["link_gb_s"]): r["crossover_tokens"] for r in rows}
    links, peaks = sorted({r["link_gb_s"] for r in rows}), sorted({r["peak_tflops"] for r in rows})
    assert links == [12, 25, 50] and peaks == [400, 989]
    for peak in peaks:   # a faster link: swapping wins from fewer tokens
        crossovers = [table[peak, link] for link in links]
        assert crossovers == sorted(crossovers, reverse=True) and crossovers[0] > crossovers[-1]
    for link in links:   # faster compute: recomputing stays cheaper for longer
        assert table[400, link] <= table[989, link]
    assert table[400, 12] < table[989, 12]
    assert all(0 < c < float("inf") for c in table.values())


def test_step_cost_prices_are_unchanged():
    """Lessons' stored outputs depend on these: recompute is a step of t tokens alone, a swap costs
    1 us per token each way with no latency."""
    assert simulated_preemption_cost() == StepCost().preemption_cost() == PreemptionCost(
        1.86e-3, 2.2e-4 + 1.2e-6, 0.0, 0.0, 2e-6)
    assert StepCost().copy_s(16) == pytest.approx(16e-6)


def test_roofline_preemption_prices():
    cost = H100.step_cost
    prices = cost.preemption_cost()
    assert prices.recompute_fixed == 0.0   # rows added to a step that runs anyway
    assert prices.recompute_per_token == pytest.approx(2 * LLAMA3_8B.streamed_params / (989e12 * 0.6))
    assert prices.swap_s(100) == pytest.approx(2 * cost.copy_s(100))
    assert cost.per_swapped_token == pytest.approx(128 * 1024 / 50e9)


def test_the_simulator_charges_a_copy_as_the_cost_model_prices_it():
    cost = H100.step_cost
    runner = SimulatedRunner(cost=cost, num_blocks=4, block_size=16, num_swap_blocks=4)
    runner.swap_out([])
    assert runner.clock() == 0.0
    runner.swap_out([(0, 0), (1, 1)])
    assert runner.clock() == pytest.approx(cost.copy_s(32)) and cost.copy_s(32) > 32 * cost.per_swapped_token


def test_auto_preemption_runs_on_the_gpu_preset():
    """"auto" takes its prices from the roofline: past a few tokens of context it swaps."""
    engine = LLMEngine(simulate=True, step_cost=H100.step_cost, num_blocks=24, block_size=H100.block_size,
                       preemption_mode="auto", max_num_seqs=8, check_kv_invariants=True)
    outputs = run_workload(engine, make_workload(16, lengths="fixed", fixed=60, seed=0), progress=False)
    assert all(o.outputs[0].finish_reason == "length" and len(o.outputs[0].token_ids) == 60 for o in outputs)
    assert engine.scheduler.preemption_cost == H100.step_cost.preemption_cost()
    assert any(step.swapped_out for step in engine.trace.steps)


def test_config_takes_any_cost_model_and_nothing_else():
    assert EngineConfig(simulate=True, step_cost=H200.step_cost).step_cost is H200.step_cost
    with pytest.raises(ValueError, match="step_cost"):
        EngineConfig(simulate=True, step_cost=lambda num_tokens, context_tokens: 1e-3)


def test_arithmetic_intensity_is_the_flops_over_the_bytes_of_a_step_counted_by_hand():
    # One layer: q, k, v, o of 4 x 4 each (64), gate, up, down of 4 x 8 (96), two norms (8); final norm (4) and
    # an LM head of 10 x 4 (40): 212 weights, 424 bytes in bf16. A token's K and V: 2 x 4 dims x 2 bytes = 16.
    tiny = ModelShape("tiny", num_layers=1, hidden_size=4, num_heads=1, num_kv_heads=1, head_dim=4,
                      intermediate_size=8, vocab_size=10)
    # A decode of 1 token over a context of 3: 424 + 3 x 16 bytes read; 2 x 212 FLOPs, and 16 per (query, key)
    # pair for 3 pairs and the half a pair the estimate adds for the new token.
    assert tiny.step_bytes(3) == 472
    assert tiny.step_flops(1, 3) == 2 * 212 + 16 * 3.5
    assert tiny.arithmetic_intensity(1, 3) == pytest.approx(480 / 472)
    assert RooflineCost(tiny, H100_SXM).ridge_point == pytest.approx(0.6 * 989e12 / (0.8 * 3350e9))


def test_a_copy_per_piece_adds_each_blocks_pieces_to_the_bytes():
    """Each layer's K and V of a 16-token block is one piece: 64 pieces per block for 32 layers, 4 per token."""
    batched = RooflineCost(LLAMA3_8B, H100_SXM)
    per_piece = RooflineCost(LLAMA3_8B, H100_SXM, RooflineAssumptions(block_copy_overhead_s=1e-5), block_size=16)
    assert batched.per_swapped_token == pytest.approx(128 * 1024 / 50e9)
    assert per_piece.per_swapped_token == pytest.approx(128 * 1024 / 50e9 + 4 * 1e-5)
    assert per_piece.preemption_cost().swap_per_token == pytest.approx(2 * per_piece.per_swapped_token)


def test_smollm2_shapes_are_its_config_and_the_cpu_ridge_is_its_roofs_ratio():
    from minicb.lab.hardware import SMOLLM2_135M, measure_cpu_roofline
    from minicb.model.fetch import real_model_folder

    folder = real_model_folder("smollm2")
    if (folder / "config.json").is_file():   # fetched (make real-model): the stored shapes are its config's
        from minicb.model.config import read_model_config
        assert ModelShape.of(read_model_config(folder), SMOLLM2_135M.name) == SMOLLM2_135M
    assert SMOLLM2_135M.streamed_params == 134_515_008   # 30 layers of 3.5M weights, and the 28M LM head
    roofs = measure_cpu_roofline(matmul_size=64, stream_mb=1, repeats=1)
    assert roofs.flops > 0 and roofs.bandwidth > 0 and roofs.ridge_point == roofs.flops / roofs.bandwidth
