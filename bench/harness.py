"""Shared pieces of the step benchmarks (scripts/bench_gpu.py, bench_trl.py, bench_decode.py): a random
Qwen2 and a character tokenizer built with no hub access, arithmetic-looking prompts, the `bench_hash`
reward, the composed pods config of one setting, the real Trainer run with per-step timing, and the
measurement helpers (matmul peak, PeakMemory, StepClock). Benchmark logic only; nothing here is used by
training.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import string
import threading
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from pods.callbacks import Callback
from pods.config import register_schema, validate
from pods.reward import register_reward
from pods.train import preflight
from pods.trainer import Trainer

CONF = str(Path(__file__).resolve().parent.parent / "conf")
WORDS = ["please", "add", "the", "numbers", "carefully", "then", "explain", "each", "step", "and", "answer"]


@register_reward("bench_hash")
def bench_hash(completions: list[str], answers: list[str] | None = None, **kw) -> list[float]:
    """A deterministic coin per completion text, so groups of distinct completions have reward variance.

    >>> bench_hash(["a", "b", "c", "d"])
    [0.0, 0.0, 1.0, 1.0]
    """
    return [float(hashlib.blake2b(c.encode(), digest_size=8).digest()[0] & 1) for c in completions]


# --- model, tokenizer, data ---------------------------------------------------------------------


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """One token per character; filler tokens `<i>` fill the model's vocabulary so that every sampled id
    decodes to text (otherwise most of a random model's completion would decode to nothing)."""
    base = ["<pad>", "<eos>", "<unk>"] + list(string.printable)
    vocab = {t: i for i, t in enumerate(base)}
    vocab.update({f"<{i}>": i for i in range(len(base), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def build_model_dir(args, root: Path) -> Path:
    """A random Qwen2 of the requested shape plus the tokenizer, saved where `model.path` can point."""
    heads = args.heads or max(args.hidden // 64, 1)
    kv = args.kv_heads or max(heads // 7, 1)
    tok = build_tokenizer(args.vocab)
    cfg = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate or int(args.hidden * 38 / 7),  # 896 -> 4864 as in Qwen2.5-0.5B
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    if args.device == "cuda":  # initialised on the GPU: a 3B model takes about a minute on the host
        with torch.device("cuda"):
            model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    else:
        model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    path = root / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def write_data(root: Path) -> tuple[Path, Path]:
    """train/eval .jsonl of arithmetic-looking questions of 60-100 characters (= tokens here)."""
    paths, rng = (root / "train.jsonl", root / "eval.jsonl"), random.Random(1)
    for path, count in zip(paths, [256, 8]):
        rows = []
        for _ in range(count):
            a, b, target = rng.randint(10, 999), rng.randint(10, 999), rng.randint(60, 100)
            q = f"What is {a} + {b}?"
            while len(q) < target:
                q += " " + rng.choice(WORDS)
            rows.append(json.dumps({"question": q[:target], "answer": str(a + b)}) + "\n")
        path.write_text("".join(rows))
    return paths


# --- measurement --------------------------------------------------------------------------------


def torchrun_command(procs: int) -> list[str]:
    """`torchrun --nproc_per_node <procs> --master_port <a port free now>`, with this environment's torchrun
    (tests/e2e and scripts/bench_scaling.py launch the real Trainer or an update this way)."""
    import shutil
    import socket
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    return [torchrun, "--nproc_per_node", str(procs), "--master_port", str(port)]


def matmul_peak_flops(device: str) -> float:
    """Measured dense matmul FLOP/s: bf16 8192^3 on a GPU, fp32 1024^3 on a CPU."""
    size, dtype, iters = (8192, torch.bfloat16, 30) if device == "cuda" else (1024, torch.float32, 5)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    return 2 * size**3 * iters / (time.perf_counter() - t0)


def set_threads(threads: int) -> None:
    """On a small loaded CPU one thread can be many times faster than torch's default (no spin-waits)."""
    if threads > 0:
        torch.set_num_threads(threads)


def save_results(out: Path, results: dict, markdown: str) -> None:
    """A benchmark's output: results.json (every number) and results.md (its table) in `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def compose_train(overrides: list[str]):
    """conf/train.yaml composed with these overrides, as `python -m pods.train` composes it (no run dir is
    created; give run_dir= where the run needs one)."""
    register_schema()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("train", overrides=overrides)


def pods_cfg(args, model_dir: Path, data: tuple[Path, Path], run_dir: Path, selector: str, n: int, m: int):
    """The composed pods config for one setting, as `python -m pods.train` would build it."""
    # model=qwen2.5-0.5b brings the paper's hyperparameters (lr 5e-6, grad clip 0.1, temperature 0.9)
    overrides = f"""run_dir={run_dir} model=qwen2.5-0.5b model.name=bench model.path={model_dir}
        model.use_chat_template=false model.max_completion_len={args.completion_len}
        dataset=arithmetic dataset.name=bench dataset.source=local dataset.task={data[0]}
        dataset.eval_task={data[1]} dataset.train_size=0 dataset.eval_size=0
        selector={selector} selector.n={n} selector.m={m} rollout=hf logger=none
        hardware={"gpu" if args.device == "cuda" else "cpu"} hardware.lora={args.lora}
        algo.prompts_per_step={args.prompts_per_step} max_steps={args.steps} eval.at_start=false
        eval.at_end=false eval.every_steps=0 checkpoint.every_steps=0 checkpoint.save_final=false""".split()
    if args.micro_batch_size:
        overrides.append(f"update.micro_batch_size={args.micro_batch_size}")
    if args.gradient_checkpointing is not None:
        overrides.append(f"update.gradient_checkpointing={args.gradient_checkpointing}")
    overrides.append(f"seed={getattr(args, 'seed', 0)}")  # the run's seed where the script takes --seed
    overrides += list(getattr(args, "set", None) or [])
    cfg = compose_train(overrides)
    cfg.reward.weights = {"bench_hash": 1.0}
    validate(cfg)
    return cfg


class PeakMemory:
    """Memory a block adds at its peak: the CUDA allocator's peak above its start on a GPU; on a CPU the
    peak growth of the process RSS, sampled every 20 ms (rough). A pods Trainer resets CUDA's peak counter
    at every phase (pods/timing.py): pass include() its timer's max_allocated before the block ends."""

    def __init__(self, device: str):
        self.device, self.seen = device, 0

    def include(self, peak_bytes: int) -> None:
        """A peak read from the allocator inside the block, before something reset its counter."""
        self.seen = max(self.seen, peak_bytes)

    def _now(self) -> int:
        return torch.cuda.memory_allocated() if self.device == "cuda" else rss()

    def __enter__(self):
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        self.base = self.peak = self._now()  # what earlier runs left, if anything, is not counted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._now())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        peak = (
            max(torch.cuda.max_memory_allocated(), self.seen)
            if self.device == "cuda"
            else max(self.peak, rss())
        )
        self.gib, self.start_gib = (peak - self.base) / 2**30, self.base / 2**30


# packages whose frames name an allocation in a memory trace (the innermost such frame), before torch's own
APP_FRAMES = ("pods/", "trl/", "peft/", "transformers/", "accelerate/", "scripts/")


def frame_key(frames: list[dict]) -> str:
    """An allocation's innermost frame from APP_FRAMES as 'package/file.py:line function', else its innermost
    frame; frames are innermost first, as torch's allocator trace records them.

    >>> frame_key([{"filename": "/x/torch/nn/functional.py", "line": 3, "name": "linear"},
    ...            {"filename": "/y/site-packages/peft/tuners/lora/layer.py", "line": 9, "name": "forward"}])
    'peft/tuners/lora/layer.py:9 forward'
    """
    for f in frames:
        for pkg in APP_FRAMES:
            i = f["filename"].rfind("/" + pkg)
            if i >= 0:
                return f"{f['filename'][i + 1 :]}:{f['line']} {f['name']}"
    if not frames:
        return "?"
    return f"{'/'.join(frames[0]['filename'].split('/')[-2:])}:{frames[0]['line']} {frames[0]['name']}"


def peak_breakdown(trace: list[dict], end_bytes: int) -> dict:
    """A CUDA allocator trace (events of torch.cuda.memory._snapshot()['device_traces'][d], oldest first,
    possibly only the last ones) and the bytes allocated when it ended -> the peak of allocated bytes within
    the trace and what was live then, grouped by frame_key. Blocks allocated before the trace's first event
    count as 'before the trace'.

    >>> ev = lambda a, addr, size, f="/a/pods/x.py": {"action": a, "addr": addr, "size": size,
    ...                                              "frames": [{"filename": f, "line": 1, "name": "g"}]}
    >>> out = peak_breakdown([ev("alloc", 1, 10), ev("alloc", 2, 5), ev("free_completed", 9, 4),
    ...                       ev("free_completed", 1, 10)], end_bytes=101)
    >>> out["peak_bytes"], out["groups"]
    (115, {'before the trace': 100, 'pods/x.py:1 g': 15})
    """
    delta = {"alloc": 1, "free_completed": -1}
    net = sum(delta.get(e["action"], 0) * e["size"] for e in trace)
    total = peak = end_bytes - net  # allocated when the trace began
    at = -1
    for i, e in enumerate(trace):
        total += delta.get(e["action"], 0) * e["size"]
        if total > peak:
            peak, at = total, i
    live, before = {}, end_bytes - net
    for e in trace[: at + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], frame_key(e.get("frames", [])))
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                del live[e["addr"]]
            else:
                before -= e["size"]
    groups = {"before the trace": before}
    for size, key in live.values():
        groups[key] = groups.get(key, 0) + size
    return {"peak_bytes": peak, "groups": dict(sorted(groups.items(), key=lambda kv: -kv[1]))}


class MemoryTrace:
    """`with MemoryTrace(path):` records the CUDA allocator's events with Python stacks (the last
    `max_entries`), then writes `path` (.md): the peak of allocated bytes within the trace and the 30 largest
    groups of what was live at it (peak_breakdown). Does nothing on a CPU or with path None."""

    def __init__(self, path: Path | None, device: str = "cuda", max_entries: int = 400_000):
        self.path, self.on, self.max_entries = path, path is not None and device == "cuda", max_entries

    def __enter__(self):
        if self.on:
            torch.cuda.memory._record_memory_history(
                enabled="all", context="alloc", stacks="python", max_entries=self.max_entries
            )
        return self

    def __exit__(self, *exc):
        if not self.on:
            return
        torch.cuda.synchronize()
        snap, end = torch.cuda.memory._snapshot(), torch.cuda.memory_allocated()
        torch.cuda.memory._record_memory_history(enabled=None)
        trace = snap["device_traces"][torch.cuda.current_device()]
        out = peak_breakdown(trace, end)
        gib = 2**30
        lines = [
            f"# Allocated memory at the peak of a trace of {len(trace)} allocator events",
            "",
            f"Peak {out['peak_bytes'] / gib:.3f} GiB allocated (torch.cuda.max_memory_allocated at the end: "
            f"{torch.cuda.max_memory_allocated() / gib:.3f} GiB, since its last reset).",
            "",
            "| allocated by (innermost frame) | GiB live at the peak |",
            "|---|---|",
        ]
        lines += [f"| `{k}` | {v / gib:.3f} |" for k, v in list(out["groups"].items())[:30]]
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        Path(self.path).write_text("\n".join(lines) + "\n")


def rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class StepClock:
    """Wall and process-CPU seconds of repeated blocks (CUDA synchronised at both ends). On a loaded CPU
    the CPU seconds are the steadier number: time spent waiting for a core is not counted."""

    def __init__(self, device: str):
        self.device, self.wall, self.cpu = device, [], []

    def start(self) -> None:
        sync(self.device)
        self._t0 = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        sync(self.device)
        self.wall.append(time.perf_counter() - self._t0[0])
        self.cpu.append(time.process_time() - self._t0[1])


def wait_for_grader(trainer) -> None:
    """pods' reward grader boots a spare math-verify worker in the background (~1 s of CPU); on a 2-core
    machine it would slow the first timed steps 2x. A start-up cost, not a per-step one: wait it out."""
    trainer.reward_fn.grader.wait_ready(120)


class TimedSteps(Callback):
    """Wall and CPU seconds of every step, through the trainer's callback hooks."""

    def __init__(self, device: str):
        self.clock = StepClock(device)

    def on_step_start(self, trainer) -> None:
        self.clock.start()

    def on_step_end(self, trainer, record: dict) -> None:
        self.clock.stop()


def run_pods(cfg, device: str) -> dict:
    """Train cfg.max_steps steps with the real Trainer; returns its metrics plus per-step wall time,
    peak memory and parameter counts."""
    timed = TimedSteps(device)
    clock = timed.clock
    with PeakMemory(device) as mem:
        trainer = Trainer(preflight(cfg), Path(cfg.run_dir), callbacks=[timed])
        wait_for_grader(trainer)
        trainer.train()
        mem.include(trainer.timer.max_allocated)  # the run's peak: its phases reset the counter
    params = list(trainer.model.parameters())
    out = {
        "records": [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()],
        "wall_steps": clock.wall,
        "cpu_steps": clock.cpu,
        "peak_mem_gib": mem.gib,
        "start_mem_gib": mem.start_gib,
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "frozen_params": sum(p.numel() for p in params if not p.requires_grad),
    }
    trainer.reward_fn.close()
    return out


# --- command line -------------------------------------------------------------------------------


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Model shape and training flags shared with bench_trl.py (defaults: Qwen2.5-0.5B's shape)."""
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--heads", type=int, default=0, help="0: hidden / 64")
    p.add_argument("--kv-heads", type=int, default=0, help="0: heads / 7")
    p.add_argument("--intermediate", type=int, default=0, help="0: hidden * 38 / 7")
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--completion-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=6, help="per run; the first is warm-up")
    p.add_argument("--micro-batch-size", type=int, default=0, help="0: the hardware profile's")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument(
        "--lora", action="store_true", help="LoRA r=64 on all linear layers (as hardware=gpu_lora)"
    )
    p.add_argument(
        "--set",
        nargs="*",
        action="extend",  # repeated --set flags add up
        default=[],
        help="extra pods config overrides, e.g. rollout.hf.share_weights=false",
    )
    p.add_argument(
        "--memory-trace",
        default="",
        help="GPU: a folder for each run's allocator trace at its peak (MemoryTrace)",
    )
