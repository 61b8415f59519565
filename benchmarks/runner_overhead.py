"""The runner against a bare training loop: what share of one device's speed a rank keeps.

A bare loop (one process; one batch made once on the device; the workload's model,
optimizer and loss; the computation configuration applied as the profiler applies it;
each step timed with a synchronized clock on the CPU and CUDA events on a GPU; the median
after the warm-up) against ``scalelab run`` with one worker, all-reduce (one worker trains
the plain module: :mod:`scalelab.runner.allreduce`) and parameter server (one server,
shards sent in ``--piece-size`` pieces, by default one per shard as ``scalelab run`` sends
them, over Gloo's TCP and, on the CPU, through shared
memory: ``ps+shm``, :mod:`scalelab.runner.shm`), same model, batch, optimizer and
configuration. Each run's JSON row names its transport. The bare loop runs in
its own process with the thread count a one-worker rank gets, and the runs are alternated
``--repeats`` times so that a change of load on the machine falls on all of them; each
figure is the median over the repeats, each ratio is runner / bare within one repeat,
then the median. On the CPU the bare loop also runs a second time with the runner's OpenMP
wait (``scalelab.runner.launch.OMP_ENV``: a short spin, then sleep), and the
ratios against that run are printed beside: the first ratio is what a user sees against
their own loop, the second the runner's own cost.

CPU time: every process of a run (worker, server, all their threads, the transport's
included) reports its CPU time per step (``cpu_s``, the median per rank, summed), and the
bare loop its own; ``bare / it`` is the share of the host's work that is training. On a
busy host the step times follow the load, the CPU times much less (a waiting thread spins
only 3,000 times), so this figure says what the runner costs when the samples/s cannot.

Goals (issue figures): all-reduce W=1 >= 0.95 of the bare loop, PS W=1 P=1 >= 0.85, and
with synthetic data ``data_s`` <= 1% of ``step_s``.

    python benchmarks/runner_overhead.py --device cpu            # resnet18, 3x64x64, b=32
    python benchmarks/runner_overhead.py --device cuda --model resnet50 --input-shape \\
        3,224,224 --num-classes 1000 --batch-size 128 --algorithm channels_last+bf16_autocast
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def bare_loop(args) -> dict:
    """Time the bare loop in this process; returns {step_s, samples_per_s}."""
    import torch

    from scalelab.profiler import algorithms
    from scalelab.workload import WorkloadSpec, logits_of

    spec = WorkloadSpec(args.model, input_shape=args.input_shape, num_classes=args.num_classes)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = spec.build_model(seed=0).to(device)
    model.train()
    x, y = spec.synthetic_batch(args.batch_size, seed=0, device=device)
    model, x = algorithms.prepare(args.algorithm, model, x)
    opt = spec.make_optimizer(model.parameters())
    loss_fn = spec.loss_fn()
    scaler = algorithms.grad_scaler(args.algorithm, device)
    cuda = device.type == "cuda"
    times, cpu = [], []
    with algorithms.backend_flags(args.algorithm, device):
        for i in range(args.warmup + args.steps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
            else:
                t0 = time_now()
            c0 = time.process_time()
            opt.zero_grad(set_to_none=True)
            with algorithms.autocast(args.algorithm, device):
                loss = loss_fn(logits_of(model(x)), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            if cuda:
                end.record()
                end.synchronize()
                dt = start.elapsed_time(end) / 1e3
            else:
                dt = time_now() - t0
            if i >= args.warmup:
                times.append(dt)
                cpu.append(time.process_time() - c0)
    step_s = statistics.median(times)
    return {"step_s": step_s, "samples_per_s": args.batch_size / step_s,
            "cpu_s": statistics.median(cpu)}


def time_now() -> float:
    import time

    return time.perf_counter()


def run_bare(args, passive: bool = False) -> dict:
    """The bare loop in a fresh process, as a rank is one; ``passive``: with the runner's
    OpenMP wait policy (``scalelab.runner.launch.OMP_ENV``), else the environment as it is."""
    cmd = [sys.executable, __file__, "--bare-child", "--model", args.model,
           "--input-shape", args.input_shape, "--num-classes", str(args.num_classes),
           "--batch-size", str(args.batch_size), "--device", args.device,
           "--algorithm", args.algorithm, "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    env = None
    if passive:
        from scalelab.runner.launch import training_environment

        env = training_environment()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                         env=env)
    if out.returncode != 0:
        raise SystemExit(f"bare loop failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_runner(args, label: str) -> dict:
    """``label``: ``allreduce``, ``ps`` (pieces over Gloo's TCP) or ``ps+shm`` (through shared
    memory, :mod:`scalelab.runner.shm`)."""
    from scalelab.runner import RunConfig, run_training
    from scalelab.workload import WorkloadSpec

    architecture, _, transport = label.partition("+")
    spec = WorkloadSpec(args.model, input_shape=args.input_shape, num_classes=args.num_classes)
    size = args.shm_piece_size if transport == "shm" else args.piece_size
    pieces = size if architecture == "ps" and size else None
    cfg = RunConfig(workload=spec, workers=1, ps=1 if architecture == "ps" else None,
                    architecture=architecture, piece_bytes=pieces, batch_size=args.batch_size,
                    steps=args.steps + args.warmup, warmup_steps=args.warmup,
                    timeout_s=600, device=args.device, algorithm=args.algorithm,
                    threads=args.threads or None, transport=transport or "tcp")
    res = run_training(cfg)
    st = res["steps"]
    # CPU time of every rank's process per step (medians), summed: what the job costs the host
    cpu_s = sum(r.get("cpu_s") or 0.0 for r in res["per_rank"])
    med = {k: (v or {}).get("median") for k, v in st.items() if isinstance(v, dict)}
    return {"step_s": med.get("step_s"), "samples_per_s": res["samples_per_s"],
            "phases": med, "timing": res.get("timing"),
            "transport": res["config"]["transport"], "cpu_s": cpu_s,
            "exchange_form": res["config"]["exchange_form"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--input-shape", default="3,64,64")
    ap.add_argument("--num-classes", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--algorithm", default="default")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for the bare loop and the rank (0: the rank's default)")
    ap.add_argument("--architectures", default=None,
                    help="runs to alternate: allreduce, ps (pieces over Gloo's TCP), ps+shm "
                    "(through shared memory; CPU only). Default: all three on the CPU, "
                    "allreduce,ps on cuda")
    ap.add_argument("--piece-size", type=int, default=0,
                    help="the parameter server's message size in bytes (default 0: one piece "
                    "per shard, as `scalelab run` without --piece-size; 4194304 as "
                    "ps_vs_ddp.py: pieces leave while backward goes on)")
    ap.add_argument("--shm-piece-size", type=int, default=0,
                    help="the same for ps+shm (default 0, one piece per shard: the server "
                    "applies while the worker waits, not beside its backward on the same "
                    "cores; through shared memory a piece costs no transfer to hide)")
    ap.add_argument("--out", default="bench-out/runner_overhead.json")
    ap.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bare_child:
        print(json.dumps(bare_loop(args)))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("runner_overhead: --device cuda but torch sees no GPU", file=sys.stderr)
            return 2
    names = args.architectures or ("allreduce,ps" if args.device == "cuda"
                                   else "allreduce,ps,ps+shm")
    archs = [a for a in names.split(",") if a]
    rows: list[dict] = []
    print(f"{args.model} {args.input_shape} batch {args.batch_size} on {args.device}, "
          f"{args.algorithm}, load {os.getloadavg()[0]:.1f}")
    for rep in range(args.repeats):
        row = {"repeat": rep, "load_average": os.getloadavg()[0], "bare": run_bare(args)}
        if args.device == "cpu":
            row["bare_passive"] = run_bare(args, passive=True)
        for arch in archs:
            row[arch] = run_runner(args, arch)
            row[f"{arch}_ratio"] = row[arch]["samples_per_s"] / row["bare"]["samples_per_s"]
            if "bare_passive" in row:
                row[f"{arch}_ratio_passive"] = (row[arch]["samples_per_s"]
                                                / row["bare_passive"]["samples_per_s"])
        rows.append(row)
        parts = [f"bare {row['bare']['samples_per_s']:.1f}/s"]
        if "bare_passive" in row:
            parts.append(f"bare, runner's OpenMP wait {row['bare_passive']['samples_per_s']:.1f}/s")
        for arch in archs:
            ph = row[arch]["phases"]
            data_share = (ph.get("data_s") or 0.0) / ph["step_s"]
            passive = (f" / {row[f'{arch}_ratio_passive']:.2f}"
                       if f"{arch}_ratio_passive" in row else "")
            parts.append(f"{arch} {row[arch]['samples_per_s']:.1f}/s "
                         f"({row[f'{arch}_ratio']:.2f}{passive}, data {100 * data_share:.2f}% "
                         "of step)")
        print(f"  repeat {rep + 1}: " + "; ".join(parts), flush=True)
    summary = {"bare_samples_per_s": statistics.median(r["bare"]["samples_per_s"] for r in rows)}
    passive = all("bare_passive" in r for r in rows)
    if passive:
        summary["bare_passive_samples_per_s"] = statistics.median(
            r["bare_passive"]["samples_per_s"] for r in rows)
    for arch in archs:
        summary[f"{arch}_samples_per_s"] = statistics.median(r[arch]["samples_per_s"]
                                                            for r in rows)
        summary[f"{arch}_ratio"] = statistics.median(r[f"{arch}_ratio"] for r in rows)
        if passive:
            summary[f"{arch}_ratio_passive"] = statistics.median(
                r[f"{arch}_ratio_passive"] for r in rows)
        ref = "bare_passive" if passive else "bare"  # the runner's OpenMP wait, where run
        summary[f"{arch}_cpu_s"] = statistics.median(r[arch]["cpu_s"] for r in rows)
        summary[f"{arch}_cpu_ratio"] = statistics.median(r[ref]["cpu_s"] / r[arch]["cpu_s"]
                                                         for r in rows)
        summary[f"{arch}_data_share"] = statistics.median(
            (r[arch]["phases"].get("data_s") or 0.0) / r[arch]["phases"]["step_s"] for r in rows)
    goals = {"allreduce": 0.95, "ps": 0.85, "ps+shm": 0.85}
    for arch in archs:
        print(f"{arch:>9} W=1: {summary[f'{arch}_samples_per_s']:.1f} samples/s, "
              f"{summary[f'{arch}_ratio']:.3f} of the bare loop's "
              f"{summary['bare_samples_per_s']:.1f} (goal >= {goals.get(arch, 0):.2f})"
              + (f", {summary[f'{arch}_ratio_passive']:.3f} of it with the runner's OpenMP "
                 "wait" if passive else "") + "; "
              f"data_s {100 * summary[f'{arch}_data_share']:.2f}% of step_s (goal <= 1%)")
    ref = "bare_passive" if passive else "bare"
    bare_cpu = statistics.median(r[ref]["cpu_s"] for r in rows)
    print(f"CPU time per step, every process of the job: bare {1e3 * bare_cpu:.0f} ms; "
          + "; ".join(f"{arch} {1e3 * summary[f'{arch}_cpu_s']:.0f} ms (bare / it "
                      f"{summary[f'{arch}_cpu_ratio']:.3f})" for arch in archs)
          + f"; load average {min(r['load_average'] for r in rows):.1f} to "
          f"{max(r['load_average'] for r in rows):.1f}")
    summary["bare_cpu_s"] = bare_cpu
    from scalelab.results import write_text_atomic

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    write_text_atomic(args.out, json.dumps({
        "config": {k: v for k, v in vars(args).items() if k != "bare_child"},
        "load_average": os.getloadavg(), "repeats": rows, "summary": summary}, indent=1))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
