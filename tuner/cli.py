"""`autotune`: tune an operator, a suite or a model from the shell, read record files, and
measure the machine.

Every user mistake ends in one line on stderr and exit code 2; a run that measured nothing
successfully exits 1; success exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `autotune --help` must answer without loading TVM
    from workloads import Workload

    from .result import TuneResult

SHAPE_PARAMS = {
    "matmul": ("M", "N", "K"),
    "batch_matmul": ("B", "M", "N", "K"),
    "conv2d": ("N", "C", "H", "W", "K", "R", "S"),
    "depthwise_conv2d": ("N", "C", "H", "W", "R", "S"),
}
OPTION_PARAMS = {
    "matmul": ("transpose_b", "epilogue", "constant_weights", "dtype"),
    "batch_matmul": ("transpose_b", "dtype"),
    "conv2d": ("stride", "padding", "dilation", "layout", "epilogue", "constant_weights", "dtype"),
    "depthwise_conv2d": ("stride", "padding", "dilation", "epilogue", "constant_weights", "dtype"),
}


class UsageError(Exception):
    """A mistake in what the user typed: reported in one line, exit code 2."""


def _parser() -> argparse.ArgumentParser:
    from .defaults import BATCH_SIZE
    from search.version import __version__

    parser = argparse.ArgumentParser(prog="autotune", description="Learning-based tuner for matmul and conv kernels.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def run_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--target", default="llvm", help="llvm (this CPU), cuda, or a TVM target as JSON")
        p.add_argument("--trials", type=int, default=64, help="measurements in all (default 64)")
        p.add_argument("--records", help="JSON-lines file to append to and resume from")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--strategy", default="evolutionary", choices=["evolutionary", "annealing", "random"])
        p.add_argument("--model", default="lightgbm", help="lightgbm, torch, or a saved model file (.txt, .pt)")
        p.add_argument("--no-pretrained", action="store_true", help="start from an untrained model")
        p.add_argument("--batch-size", type=int,
                       help=f"configs measured per round (default {BATCH_SIZE}; on a Ray cluster with more cores "
                            "than that, one per core)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--json", action="store_true", help="print the result as JSON")

    tune = commands.add_parser("tune", help="tune one operator")
    tune.add_argument("op", choices=sorted(SHAPE_PARAMS))
    tune.add_argument("--shape", required=True, help="comma-separated sizes, e.g. 512,512,512 for matmul M,N,K")
    tune.add_argument("--stride", type=int)
    tune.add_argument("--padding", type=int)
    tune.add_argument("--dilation", type=int)
    tune.add_argument("--layout", help="NCHW or NHWC (conv2d)")
    tune.add_argument("--epilogue", help="bias, relu, bias_relu, gelu or bias_gelu")
    tune.add_argument("--dtype", help="float32 or float16")
    tune.add_argument("--transpose-b", action="store_true")
    tune.add_argument("--constant-weights", action="store_true",
                      help="the weight (input 1) is the same on every call, as a model layer's: kernels may "
                           "take it in a layout of their own, laid out once")
    tune.add_argument("--time-budget", type=float, help="seconds")
    tune.add_argument("--early-stopping", type=int, help="stop after this many trials without improvement")
    run_options(tune)

    def cluster_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ray-address", help="measure on the nodes of this Ray cluster ('auto': the one this "
                                             "machine belongs to); needs pip install \"autotune[distributed]\"")
        p.add_argument("--ray-resource", default="autotune_node",
                       help="the custom resource the measuring nodes offer (default autotune_node)")

    suite = commands.add_parser("suite", help="tune every layer of a model suite")
    suite.add_argument("name", help="resnet50, bert_base, llm_7b or mobilenet_v2")
    run_options(suite)
    cluster_options(suite)
    suite.set_defaults(trials=2000)

    model = commands.add_parser("model", help="tune every matrix product and convolution of a PyTorch model")
    model.add_argument("name", nargs="?", help="a model of the zoo: resnet50, mobilenet_v2, bert_base, "
                                               "llama_7b_prefill or llama_7b_decode")
    model.add_argument("--module", help="your own model instead: package.module:factory, a function of no "
                                        "arguments returning the torch.nn.Module")
    model.add_argument("--input-shape", action="append", default=[],
                       help="the shape of an input of your model, e.g. 1,3,224,224 (once per input)")
    model.add_argument("--input-dtype", default="float32", help="dtype of those inputs (default float32)")
    model.add_argument("--time-budget", type=float, help="seconds")
    run_options(model)
    cluster_options(model)
    model.set_defaults(trials=2000)

    best = commands.add_parser("best", help="the best of each workload in a records file")
    best.add_argument("records")
    best.add_argument("--json", action="store_true")

    commands.add_parser("operators", help="list the operators and their shape parameters")

    machine = commands.add_parser("machine", help="this CPU's measured peak FLOP/s, memory bandwidth and caches")
    machine.add_argument("--remeasure", action="store_true", help="measure again instead of reading the cache")
    machine.add_argument("--json", action="store_true")
    return parser


def _workload(args: argparse.Namespace) -> Workload:
    from workloads import make

    names = SHAPE_PARAMS[args.op]
    try:
        sizes = [int(s) for s in args.shape.split(",")]
    except ValueError:
        raise UsageError(f"--shape must be comma-separated integers, got {args.shape!r}") from None
    if len(sizes) != len(names):
        raise UsageError(f"{args.op} takes {len(names)} sizes ({','.join(names)}), got {len(sizes)}: {args.shape}")
    params = dict(zip(names, sizes))
    for name in OPTION_PARAMS[args.op]:
        value = getattr(args, name)
        if value not in (None, False):
            params[name] = value
    given = [n for n in ("stride", "padding", "dilation", "layout", "epilogue", "transpose_b", "constant_weights")
             if getattr(args, n) not in (None, False) and n not in OPTION_PARAMS[args.op]]
    if given:
        raise UsageError(f"{args.op} does not take --{given[0].replace('_', '-')}")
    return make(args.op, **params)


def _user_model(spec: str, shapes: list[str], dtype: str) -> tuple[Any, tuple[Any, ...]]:
    """`package.module:factory` called, and random inputs of the given shapes."""
    import importlib

    import torch

    module_name, _, factory_name = spec.partition(":")
    if not module_name or not factory_name:
        raise UsageError(f"--module must look like package.module:factory, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as err:
        raise UsageError(f"--module {spec}: {err}") from None
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--module {spec} returned a {type(model).__name__}, not a torch.nn.Module")
    if not shapes:
        raise UsageError("--module needs --input-shape, once per input of the model")
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise UsageError(f"--input-dtype {dtype!r} is not a torch dtype")
    inputs = []
    for text in shapes:
        try:
            shape = [int(s) for s in text.split(",")]
        except ValueError:
            raise UsageError(f"--input-shape must be comma-separated integers, got {text!r}") from None
        tensor_dtype = getattr(torch, dtype)
        inputs.append(torch.randn(shape).to(tensor_dtype) if tensor_dtype.is_floating_point
                      else torch.randint(0, 2, shape, dtype=tensor_dtype))
    return model, tuple(inputs)


def _model(args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], str]:
    """The model to tune, its example inputs and its name, from the zoo or the user's module."""
    from workloads.models import ZOO, zoo_model

    if (args.name is None) == (args.module is None):
        raise UsageError("give a zoo model name or --module package.module:factory (one of them)")
    if args.module is not None:
        model, inputs = _user_model(args.module, args.input_shape, args.input_dtype)
        return model, inputs, args.module.rpartition(":")[2]
    if args.name not in ZOO:
        raise UsageError(f"unknown model {args.name!r}; the zoo has {', '.join(ZOO)}")
    model, inputs = zoo_model(args.name)
    return model, inputs, args.name


def _cluster(args: argparse.Namespace) -> Any:
    """A RayMeasurer for --ray-address, or a context that gives None (measure here)."""
    from contextlib import nullcontext

    if getattr(args, "ray_address", None) is None:
        return nullcontext()
    from .measure.cluster import RayMeasurer, import_ray

    try:
        import_ray()
    except ImportError as err:
        raise UsageError(f"--ray-address: {err}") from None
    return RayMeasurer(args.ray_address, resource=args.ray_resource)


def _target(text: str) -> Any:
    if text.strip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"--target is not valid JSON: {err}") from None
    if text not in ("llvm", "cuda"):
        raise UsageError(f"--target must be llvm, cuda or a JSON target dict, got {text!r}")
    return text


def _summary(result: TuneResult) -> dict[str, Any]:
    return {"workload": result.workload.key, "target": result.target.kind,
            "best_latency_s": result.best_latency if result.ok else None, "gflops": result.gflops,
            "trials": len(result.trace), "errors": result.errors,
            "best_config": result.best_config.to_json() if result.best_config is not None else None}


def _report(results: list[TuneResult], as_json: bool, extra: dict[str, Any] | None = None) -> int:
    summaries = [_summary(r) for r in results]
    if as_json:
        print(json.dumps({**(extra or {}), "results": summaries}, indent=1))
    else:
        for s in summaries:
            latency = f"{s['best_latency_s'] * 1e3:.4g} ms" if s["best_latency_s"] else "none"
            print(f"{s['workload']}: best {latency}, {s['gflops']:.1f} GFLOPS, {s['trials']} trials, "
                  f"errors {s['errors'] or 'none'}")
        for key, value in (extra or {}).items():
            print(f"{key}: {value}")
    failed = [r for r in results if not r.ok and len(r.trace)]
    for r in failed:
        kinds = ", ".join(f"{k} x{n}" for k, n in r.errors.items())
        print(f"autotune: every candidate of {r.workload.key} failed ({kinds})", file=sys.stderr)
    untried = [r for r in results if not len(r.trace)]
    if untried:
        print(f"autotune: {len(untried)} of {len(results)} workloads got no trial before the budget ran out "
              "(give more --trials)", file=sys.stderr)
    return 1 if failed or len(untried) == len(results) else 0


def _best(args: argparse.Namespace) -> int:
    from workloads import from_key

    from search.records import RecordStore, is_ok, median_cost

    store = RecordStore(args.records)
    rows = []
    for workload in sorted(store.workloads()):
        for target in sorted(store.targets()):
            records = store.select(workload, target)
            if not records:
                continue
            best = store.best(workload, target)
            latency = median_cost(best) if best else None
            rows.append({"workload": workload, "target": target, "best_latency_s": latency,
                         "gflops": from_key(workload).flops / latency / 1e9 if latency else 0.0,
                         "trials": len(records), "errors": sum(not is_ok(r) for r in records)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        import pandas as pd

        print(pd.DataFrame(rows).to_string(index=False) if rows else f"{args.records}: no records")
    return 0


def _machine(args: argparse.Namespace) -> int:
    from .measure.machine import cache_path, machine_facts
    from search import resolve_target

    facts = machine_facts(remeasure=args.remeasure)
    if args.json:
        print(json.dumps(facts.to_json(), indent=1))
        return 0
    theoretical = (f"{facts.theoretical_gflops:.1f} GFLOP/s at the {facts.clock_mhz:.0f} MHz the OS reports"
                   if facts.theoretical_gflops else "unknown (no clock reported)")
    caches = ", ".join(f"{level} {size >> 10} KiB" for level, size in sorted(facts.caches.items()))
    print(f"CPU: {facts.cpu_model} ({facts.mcpu}), {facts.cores} cores, {facts.vector_bits}-bit vectors "
          f"({', '.join(facts.isa)})\n"
          f"peak FP32: {facts.peak_gflops:.1f} GFLOP/s on {facts.cores} cores, {facts.peak_gflops_1core:.1f} on one "
          f"({facts.flops_per_cycle} FLOP/cycle/core: {facts.implied_clock_mhz:.0f} MHz implied)\n"
          f"theoretical: {theoretical}\n"
          f"memory bandwidth (triad): {facts.bandwidth_gbs:.1f} GB/s; balance {facts.balance:.1f} FLOP/byte\n"
          f"caches: {caches or 'unknown'}\n"
          f"measured {facts.measured_at}, cached in {cache_path(resolve_target('llvm'))}")
    return 0


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import workloads  # light: user mistakes in shapes and names are reported before TVM loads

    if args.command == "operators":
        for op, names in SHAPE_PARAMS.items():
            print(f"{op}: --shape {','.join(names)}  options: {', '.join(OPTION_PARAMS[op])}")
        return 0
    if args.command == "best":
        return _best(args)
    if args.command == "machine":
        return _machine(args)
    if args.trials < 1:
        raise UsageError(f"--trials must be a positive integer, got {args.trials}")
    workload = _workload(args) if args.command == "tune" else None
    suite = workloads.load_suite(args.name) if args.command == "suite" else None
    model = _model(args) if args.command == "model" else None
    target = _target(args.target)
    import tuner

    options = dict(target=target, trials=args.trials, records=args.records, seed=args.seed,
                   strategy=args.strategy, model=args.model, pretrained=not args.no_pretrained,
                   progress=not args.quiet and not args.json, batch_size=args.batch_size)
    if workload is not None:
        result = tuner.tune(workload, time_budget_s=args.time_budget, early_stopping=args.early_stopping, **options)
        return _report([result], args.json)
    with _cluster(args) as measurer:
        if model is not None:
            module, inputs, name = model
            tuned = tuner.tune_model(module, inputs, name=name, time_budget_s=args.time_budget, measurer=measurer,
                                     **options)
        else:
            assert suite is not None  # the command is "suite"
            outcome = tuner.tune_suite(suite, measurer=measurer, **options)
    if model is not None:
        captured = tuned.suite
        return _report(list(tuned.tuned.results.values()), args.json, {
            "capture": captured.method, "coverage_of_gemm_conv_flops": round(captured.coverage, 4),
            "coverage_of_all_flops": round(captured.coverage_of_all, 4),
            "left_to_torch": ", ".join(captured.left_to_torch), "estimated_layers_latency_s": tuned.estimated_latency})
    return _report(list(outcome.results.values()), args.json, {"weighted_latency_s": outcome.weighted_latency})


def main(argv: list[str] | None = None) -> None:
    from search.records import RecordError

    warnings.simplefilter("default")
    try:
        code = run(argv)
    except (UsageError, ValueError, RecordError, FileNotFoundError, IsADirectoryError, ConnectionError) as err:
        print(f"autotune: error: {err}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("autotune: interrupted; finished measurements are saved", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
