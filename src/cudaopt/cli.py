"""The ``cudaopt`` command line: a thin layer over the core modules."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .experiment import (
    Experiment,
    ExperimentError,
    check_kernel_entry,
    load_experiment,
    load_launch,
    read_text_file,
)
from .record.rundir import write_json

app = typer.Typer(
    help="Turn a workload description into a fast CUDA kernel you can trust.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NO_GPU = 3
EXIT_INTERNAL = 4
EXIT_MODEL_FAILED = 5


def console(stderr: bool = False) -> Console:
    """Made per command, so the terminal width is read when the command runs. Output that is not
    a terminal (a pipe, a CI log) gets room for the widest table: no case name is cut short."""
    made = Console(stderr=stderr)
    return made if made.is_terminal else Console(stderr=stderr, width=max(made.width, PIPED_WIDTH))


PIPED_WIDTH = 240


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"cudaopt {version('cudaopt')}")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Turn a workload description into a fast CUDA kernel you can trust."""


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Experiment config file (JSON); flags override it.")]
DescriptionOpt = Annotated[str | None, typer.Option("--description", help="What the kernel computes.")]
SignatureOpt = Annotated[str | None, typer.Option("--signature", help='Kernel signature: extern "C" __global__ void name(...).')]
ReferenceOpt = Annotated[Path | None, typer.Option("--reference", help="Trusted reference: a .cu kernel or a .py NumPy function.")]
InitialOpt = Annotated[Path | None, typer.Option("--initial-kernel", help="The kernel to start from (.cu).")]
CasesOpt = Annotated[Path | None, typer.Option("--input-cases", help="Input cases (JSON).")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def no_gpu(exc: Exception) -> typer.Exit:
    """Exit 3 with what failed and what to do: doctor says what is missing; check needs no GPU."""
    reason = str(exc).removesuffix("; log: (empty)")
    return fail(f"{reason} — `cudaopt doctor` shows what this machine lacks; `cudaopt check` checks an "
                "experiment without a GPU", EXIT_NO_GPU)


def check_output_path(path: Path, option: str) -> None:
    """Refuse, before any work, an output path that cannot take a regular file: a device, a
    folder, a missing or read-only folder (a symlink such as /dev/stdout is never replaced)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise fail(f"{option} {path}: exists and is not a regular file (use - for standard output)")
    folder = path.parent
    if not folder.is_dir():
        raise fail(f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise fail(f"{option} {path}: not writable")


def _preflight(exp: Experiment, **kwargs):
    """The checks of ``cudaopt check``, before any GPU work; a failure is bad input (exit 2)."""
    from .preflight import preflight

    try:
        with Console(stderr=True).status("checking the experiment…"):
            return preflight(exp, **kwargs)
    except ExperimentError as exc:
        raise fail(str(exc)) from None


def _kernel_source(exp: Experiment, path: Path, entry: str | None) -> str:
    """A kernel file's text, its entry and signature matched to the experiment (exit 2 otherwise)."""
    if not path.is_file():
        raise fail(f"--kernel: {path} not found")
    try:
        source = read_text_file(path, "--kernel")
        check_kernel_entry(path, source, entry or exp.signature.name, exp.signature)
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    return source


def _experiment(config, description, signature, reference, initial_kernel, input_cases) -> Experiment:
    try:
        return load_experiment(
            config, description=description, signature=signature, reference=reference,
            initial_kernel=initial_kernel, input_cases=input_cases,
        )
    except ExperimentError as exc:
        raise fail(str(exc)) from None


@app.command()
def check(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="Check this kernel instead of the initial kernel.")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")] = None,
    arch: Annotated[str | None, typer.Option("--arch", help="Target architecture, e.g. sm_90 (default: the local GPU's, else sm_90).")] = None,
) -> None:
    """Check an experiment without a GPU: files, fields, every expression on every case, the
    reference (a .py one is called on the smallest case), the kernels compiled with NVRTC."""
    exp = _experiment(config, description, signature, reference, initial_kernel, input_cases)
    if kernel is not None:
        _kernel_source(exp, kernel, entry)
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise fail(f"--arch: {arch!r} is not an architecture such as sm_90")
    done = _preflight(exp, kernel=kernel, entry=entry, arch=arch)
    table = Table(title="cudaopt check: ready", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    for item in done:
        table.add_row(item.what, item.detail)
    console().print(table)


@app.command()
def evaluate(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    kernel: Annotated[Path | None, typer.Option("--kernel", help="Kernel to evaluate (default: the initial kernel).")] = None,
    entry: Annotated[str | None, typer.Option("--entry", help="Entry point name (default: the signature's name).")] = None,
    launch: Annotated[str | None, typer.Option("--launch", help='Launch configuration as JSON or a JSON file: {"grid": [...], "block": [...], "shared_bytes": 0}.')] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the full result here (- for standard "
                                                                 "output; the tables then go to standard error).")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="Warm-up launches per case (default 10).")] = None,
    iterations: Annotated[int | None, typer.Option(min=1, help="Timed launches per case (default 100).")] = None,
    device: Annotated[int, typer.Option(min=0, help="GPU ordinal.")] = 0,
    time_reference: Annotated[bool, typer.Option(help="Also time a .cu reference, for the speed-up column.")] = True,
) -> None:
    """Check a kernel on every correctness and performance case, and time it honestly."""
    from .evaluate import evaluate_kernel
    from .evaluation.supervisor import Supervisor, WorkerError
    from .render import evaluation_table, failure_lines

    exp = _experiment(config, description, signature, reference, initial_kernel, input_cases)
    path = kernel or exp.initial_kernel_path
    if path is None:
        raise fail("--kernel: no kernel given and the experiment has no initial kernel")
    source = _kernel_source(exp, path, entry)
    try:
        launch_spec = load_launch(launch) if launch else None
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    protocol = exp.protocol()
    if warmup is not None:
        protocol.warmup = warmup
    if iterations is not None:
        protocol.iterations = iterations
    to_stdout = json_out is not None and str(json_out) == "-"
    if json_out is not None and not to_stdout:
        check_output_path(json_out, "--json")
    _preflight(exp, kernel=path, entry=entry, tune=False)
    out = console(stderr=to_stdout)
    try:
        with Supervisor(devices=[device]) as supervisor:
            with out.status(f"evaluating {path.name} on {len(exp.cases({'correctness', 'performance'}))} cases…"):
                result = evaluate_kernel(exp, source, supervisor, entry=entry, launch=launch_spec,
                                         protocol=protocol, time_reference=time_reference)
    except WorkerError as exc:
        raise no_gpu(exc) from None
    out.print(evaluation_table(result))
    for line in failure_lines(result):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if to_stdout:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=True, default=str))
    elif json_out:
        write_json(json_out, result.to_dict())
        out.print(f"result written to {json_out}", soft_wrap=True)
    if not result.candidate.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def optimize(
    config: ConfigOpt = None,
    description: DescriptionOpt = None,
    signature: SignatureOpt = None,
    reference: ReferenceOpt = None,
    initial_kernel: InitialOpt = None,
    input_cases: CasesOpt = None,
    max_iterations: Annotated[int | None, typer.Option(min=1, help="Improvement attempts (default 7, or the config's).")] = None,
    model: Annotated[str, typer.Option(help="provider:model for LangChain's init_chat_model.")] = "openai:gpt-5-mini",
    reasoning_effort: Annotated[str, typer.Option(help="For reasoning models (gpt-5, o-series).")] = "medium",
    base_url: Annotated[str | None, typer.Option(help="An OpenAI-compatible server (vLLM, Ollama, llama.cpp).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run-NNN directories go.")] = Path("results"),
    max_model_calls: Annotated[int | None, typer.Option(min=1, help="Stop after this many requests to the model.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(min=0, help="Stop once the estimated cost reaches this.")] = None,
    time_limit: Annotated[float | None, typer.Option(min=1, help="Stop after this many seconds of wall time.")] = None,
    patience: Annotated[int | None, typer.Option(min=1, help="Stop after this many attempts without a new best.")] = None,
    max_model_errors: Annotated[int, typer.Option(min=1, help="Stop (exit 5) after this many model errors in a row; "
                                                          "refused credentials stop at once.")] = 3,
    prices: Annotated[Path | None, typer.Option(help='JSON {"model": {"input": USD/M, "output": USD/M}} overriding the price table.')] = None,
    resume: Annotated[Path | None, typer.Option(help="Continue an interrupted run directory.")] = None,
    device: Annotated[int, typer.Option(min=0, help="GPU ordinal.")] = 0,
    strategy: Annotated[str, typer.Option(help="auto | agent | agent+tune | tune. auto: agent+tune when the model's "
                                                "credentials are set, tune otherwise.")] = "auto",
    max_evals: Annotated[int, typer.Option(min=1, help="Configurations the tuner may evaluate.")] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the tuner's sampler.")] = 0,
    ablation: Annotated[bool, typer.Option(help="Also tune only, and report what the agent added beyond tuning.")] = False,
    cache: Annotated[bool, typer.Option(help="Reuse results of identical configurations (results/cache/).")] = True,
    nvidia_research: Annotated[bool, typer.Option("--nvidia-research", help="Give the model a search tool over "
                                                   "CUDA optimisation guidance: the bundled entries and the NVIDIA "
                                                   "pages they cite, fetched once and cached (see `cudaopt docs`).")] = False,
    use_nsight: Annotated[bool, typer.Option("--use-nsight", help="Give the model its instruments: Nsight Compute "
                                             "bottleneck cards (profile_kernel; the loop also profiles the best "
                                             "kernel when progress stalls) and compiled-code summaries "
                                             "(inspect_compiled).")] = False,
) -> None:
    """Improve a kernel (a model in the loop, a tuner, or both); every step lands in results/run-NNN/."""
    from .agent.graph import MODEL_FAILURE, Budget
    from .agent.model import ModelSettings, credentials_problem, make_chat_model
    from .evaluation.supervisor import Supervisor, WorkerError
    from .optimize import STRATEGIES, ExperimentArgs, start_or_resume
    from .render import OptimizeProgress, summary_table

    settings = ModelSettings(model=model, reasoning_effort=reasoning_effort, base_url=base_url)
    if prices is not None:
        try:
            settings.prices.update(_read_prices(prices))
        except ExperimentError as exc:
            raise fail(str(exc)) from None
    if strategy not in STRATEGIES:
        raise fail(f"--strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    absolute = lambda p: str(p.resolve()) if p else None
    args = ExperimentArgs(config=absolute(config), description=description, signature=signature,
                          reference=absolute(reference), initial_kernel=absolute(initial_kernel),
                          input_cases=absolute(input_cases), max_iterations=max_iterations)
    if resume is None:
        try:
            iterations = max_iterations or args.load().max_iterations
        except ExperimentError as exc:
            raise fail(str(exc)) from None
    else:
        iterations = max_iterations or _stored_iterations(resume)
    problem = credentials_problem(settings) if strategy != "tune" and resume is None else None
    if strategy == "auto" and resume is None:
        strategy = "tune" if problem else "agent+tune"
        reason = f"no model: {problem}" if problem else f"{settings.model} is configured"
        Console(stderr=True).print(f"strategy: {strategy} ({reason})", highlight=False, soft_wrap=True)
        problem = None
    if problem:
        raise fail(problem)
    if strategy != "tune":
        try:  # a model string the provider cannot build fails here, before any GPU work or run directory
            make_chat_model(settings)
        except Exception as exc:
            raise fail(f"--model {settings.model}: {' '.join(str(exc).split())[:300]}") from None
    if nvidia_research and strategy != "tune":
        from .agent.research import default_library

        for notice in default_library().notices:  # fetched here, before the run, so notices precede the progress
            Console(stderr=True).print(notice, highlight=False, markup=False, soft_wrap=True)
    if results_dir.exists() and not results_dir.is_dir():
        raise fail(f"--results-dir {results_dir}: exists and is not a folder")
    if resume is None:
        _preflight(args.load())
    budget = Budget(max_iterations=iterations, max_model_calls=max_model_calls, max_cost_usd=max_cost_usd,
                    time_limit_s=time_limit, patience=patience, max_model_errors=max_model_errors)
    out = console()
    try:
        with Supervisor(devices=[device]) as supervisor, OptimizeProgress(out, max_evals if strategy == "tune" else budget.max_iterations) as progress:
            run, summary = start_or_resume(args, settings, budget, results_dir, supervisor, strategy=strategy,
                                           resume=resume, on_progress=progress, max_evals=max_evals, seed=seed,
                                           ablation=ablation, use_cache=cache, research=nvidia_research,
                                           use_nsight=use_nsight, device_index=device)
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    except WorkerError as exc:
        raise no_gpu(exc) from None
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted: the run directory holds every finished attempt; continue it with --resume")
        raise typer.Exit(130) from None
    out.print(summary_table(summary))
    t = summary.totals
    out.print(f"{summary.attempts} attempts ({summary.valid} valid), {t.model_calls} model calls, "
              f"{t.input_tokens} input / {t.output_tokens} output tokens, ${t.cost_usd:.4f}, "
              f"GPU {t.gpu_seconds:.1f} s, wall {t.wall_seconds:.1f} s", highlight=False)
    if summary.best_defines:
        out.print(f"best tunables: {summary.best_defines}", highlight=False)
    for flag in summary.review:
        out.print(f"[bold yellow]review:[/] {escape(flag)}", highlight=False)
    if summary.ablation:
        gain = summary.ablation["agent_gain_over_tuning"]
        out.print(f"ablation: tuning alone reached {summary.ablation['tune_only_best_score_us']} µs; "
                  f"the agent added {gain:.2f}× beyond it" if gain else "ablation: no comparison", highlight=False)
    out.print(f"audit pack: {run.path}", soft_wrap=True, highlight=False)
    if summary.stop_reason.startswith(MODEL_FAILURE):
        raise fail(f"the run stopped on a model failure: {summary.stop_reason.removeprefix(MODEL_FAILURE)}",
                   EXIT_MODEL_FAILED)


def _read_prices(path: Path) -> dict:
    from pydantic import TypeAdapter, ValidationError

    from .experiment import read_json_file

    try:
        return TypeAdapter(dict[str, dict[str, float]]).validate_python(read_json_file(path, "price file"))
    except ValidationError as exc:
        raise ExperimentError(path, ".".join(map(str, exc.errors()[0]["loc"])), exc.errors()[0]["msg"]) from None


def _stored_iterations(run_dir: Path) -> int:
    import json

    try:
        return int(json.loads((run_dir / "settings.json").read_text())["budget"]["max_iterations"])
    except (OSError, KeyError, ValueError) as exc:
        raise fail(f"{run_dir}: not a resumable run directory ({exc.__class__.__name__}: {exc})") from None


@app.command()
def replay(
    target: Annotated[Path, typer.Argument(help="A run directory, or one best-case-N.json request.")],
    repeats: Annotated[int, typer.Option(min=1, help="Interleaved winner/baseline measurements per case.")] = 5,
    device: Annotated[int, typer.Option(min=0, help="GPU ordinal.")] = 0,
) -> None:
    """Measure the winner again beside the baseline; exit 1 if a check fails or the GPU/driver differ."""
    from .evaluation.supervisor import Supervisor, WorkerError
    from .replay import replay as run_replay
    from .report.build import build

    try:
        with Supervisor(devices=[device]) as supervisor:
            outcome = run_replay(target, supervisor, repeats)
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    except WorkerError as exc:
        raise no_gpu(exc) from None
    table = Table(title="replay", title_justify="left")
    for column in ("case", "outcome", "recorded µs", "now µs", "within noise", "vs baseline", "beats baseline",
                   "vs vendor"):
        table.add_column(column)
    fmt = lambda v, spec=".2f": format(v, spec) if isinstance(v, (int, float)) else "-"
    for c in outcome["cases"]:
        table.add_row(c["name"], c["status"], fmt(c.get("recorded_us")), fmt(c.get("now_us")),
                      str(c.get("within_noise", "-")), fmt(c.get("speedup_vs_baseline"), ".2f") + ("×" if c.get("speedup_vs_baseline") else ""),
                      str(c.get("beats_baseline", "-")),
                      f"{c['speedup_vs_vendor']:.2f}×" if c.get("speedup_vs_vendor") else "-")
    out = console()
    out.print(table)
    for line in outcome["environment_differences"]:
        out.print(f"environment differs: {line}", markup=False, highlight=False)
    for line in outcome["failures"]:
        out.print(f"failed: {line}", markup=False, highlight=False, soft_wrap=True)
    if target.is_dir() and (target / "summary.json").is_file():
        build(target)  # the report's verdict reads replay.json
    if not outcome["passed"]:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def verify(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/run-NNN).")],
    cases: Annotated[Path | None, typer.Option("--cases", help="Extra input cases (JSON) besides the holdout.")] = None,
    seed: Annotated[int | None, typer.Option(help="Base seed for the inputs (default: a fresh random one).")] = None,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="Also run the winner under compute-sanitizer "
                                           "(memcheck, racecheck, initcheck, synccheck) on the correctness and "
                                           "holdout cases; any error fails verification.")] = False,
    device: Annotated[int, typer.Option(min=0, help="GPU ordinal.")] = 0,
) -> None:
    """Check the winner on the holdout cases (and --cases) with fresh seeds; exit 1 on any failure."""
    from .evaluation.supervisor import Supervisor, WorkerError
    from .report.build import build
    from .verify import verify as run_verify

    err = console(stderr=True)
    try:
        if sanitize:
            from .sanitize import find_sanitizer

            find_sanitizer()  # before any GPU work: a missing tool is bad input, exit 2
        with Supervisor(devices=[device]) as supervisor, err.status("verifying") as status:
            outcome = run_verify(run_dir, supervisor, cases, seed, sanitize_device=device if sanitize else None,
                                 on_tool=lambda tool: status.update(f"compute-sanitizer --tool {tool}"))
    except ExperimentError as exc:
        raise fail(str(exc)) from None
    except WorkerError as exc:
        raise no_gpu(exc) from None
    table = Table(title=f"verify attempt #{outcome['attempt']} (seed {outcome['seed']}): "
                        f"{'PASSED' if outcome['passed'] else 'FAILED'}", title_justify="left")
    for column in ("case", "role", "outcome", "max abs error", "max rel error"):
        table.add_column(column)
    fmt = lambda v: f"{v:.3g}" if v is not None else "-"
    for c in outcome["cases"]:
        table.add_row(c["name"], c["role"], c["status"], fmt(c["max_abs_error"]), fmt(c["max_rel_error"]))
    out = console()
    out.print(table)
    for c in outcome["cases"]:
        if c["status"] != "ok":
            out.print(f"{c['name']}: {' '.join(c['reason'].split())}", markup=False, highlight=False, soft_wrap=True)
    for tool in outcome.get("sanitize", []):
        detail = "no errors" if tool["passed"] else (
            f"{tool['errors']} error(s)" if tool["errors"] else f"evaluation {tool['status']}: {tool['reason']}")
        out.print(f"compute-sanitizer {tool['tool']}: {'ok' if tool['passed'] else 'FAILED'} ({detail}); "
                  f"log: {run_dir / 'sanitize' / ('sanitize-' + tool['tool'] + '.log')}",
                  markup=False, highlight=False, soft_wrap=True)
    if (run_dir / "summary.json").is_file():
        build(run_dir)  # the report's verdict reads verify.json
    if not outcome["passed"]:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/run-NNN).")],
    engineer_hours: Annotated[float | None, typer.Option(min=0, help="Engineer time spent on the pilot.")] = None,
    engineer_rate_usd: Annotated[float | None, typer.Option(min=0, help="Engineer cost per hour.")] = None,
    gpu_hour_usd: Annotated[float | None, typer.Option(min=0, help="Price of one GPU hour.")] = None,
    calls_per_month: Annotated[float | None, typer.Option(min=0, help="Kernel calls per month in production.")] = None,
    payback_window_months: Annotated[float | None, typer.Option(min=0.01, help="Longest acceptable payback.")] = None,
    roi_case: Annotated[str | None, typer.Option(help="The case whose latency the calls pay (default: the slowest).")] = None,
) -> None:
    """Rebuild report.html for a run: verdict, per-case table, charts, attempts, usage, ROI."""
    from .record.rundir import RunDir
    from .report.build import build, run_roi
    from .report.roi import RoiInputs

    if not (run_dir / "summary.json").is_file() or not (run_dir / "history.json").is_file():
        raise fail(f"{run_dir}: not a run directory (no summary.json)")
    given = {"engineer_hours": engineer_hours, "engineer_rate_usd": engineer_rate_usd, "gpu_hour_usd": gpu_hour_usd,
             "calls_per_month": calls_per_month, "payback_window_months": payback_window_months, "case": roi_case}
    base = run_roi(RunDir.open(run_dir)).model_dump()
    inputs = RoiInputs(**{**base, **{k: v for k, v in given.items() if v is not None}})
    path = build(run_dir, inputs)
    console().print(f"report written to {path}", highlight=False, soft_wrap=True)


@app.command()
def docs(
    query: Annotated[str | None, typer.Argument(help="What to look up, e.g. 'shared memory bank conflicts'.")] = None,
    top: Annotated[int, typer.Option("--top", "-k", min=1, help="How many entries to show.")] = 3,
    online: Annotated[bool, typer.Option("--online/--offline", help="--online: fetch the NVIDIA pages missing from "
                                         "the cache or older than 30 days (when that fails: a notice, and the "
                                         "bundled entries and cached pages are searched); --offline: no network, the "
                                         "bundled entries and cached pages only.")] = True,
    fetch: Annotated[bool, typer.Option("--fetch", help="Fill the page cache now and list what it holds "
                                        "(no QUERY needed); exit 1 if a page could not be fetched.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Fetch every page again, however recent.")] = False,
    page: Annotated[list[str] | None, typer.Option("--page", help="Another documentation page (URL) to fetch, "
                                                      "cache and search from now on; repeatable.")] = None,
) -> None:
    """Search CUDA optimisation guidance: the bundled entries and the NVIDIA pages they cite (cached).

    Every hit names its source: a bundled entry the NVIDIA section it summarises, a fetched section its URL.
    """
    from .agent.nvidia_docs import cache_dir
    from .agent.research import load_library

    if query is None and not fetch:
        raise fail("give a QUERY to search for, or --fetch")
    library = load_library(online=online, refresh=refresh, pages=page or ())
    for notice in library.notices:
        Console(stderr=True).print(notice, highlight=False, markup=False, soft_wrap=True)
    out = console()
    if fetch:
        for p in library.pages:
            out.print(f"{p.url}: {len(p.sections)} sections, fetched {p.fetched_at}", highlight=False, soft_wrap=True)
        out.print(f"cache: {cache_dir()}", highlight=False, soft_wrap=True)
        if library.notices:
            raise typer.Exit(EXIT_FAILED)
    if query is None:
        return
    hits = library.search(query, k=top)
    if not hits:
        out.print(f"nothing matches {query!r}", highlight=False)
        raise typer.Exit(EXIT_FAILED)
    for hit in hits:
        e = hit.entry
        out.print(f"[bold]{escape(e.title)}[/]  ({e.origin}, score {hit.score:.2f})", highlight=False)
        out.print(f"source: {e.section} — {e.source}", highlight=False, soft_wrap=True, markup=False)
        out.print(hit.excerpt, highlight=False, markup=False)
        out.print()


@app.command()
def doctor(
    measure: Annotated[bool, typer.Option("--measure", help="Measure the GPU's memory bandwidth and FP32/FP64 FMA "
                                          "peaks now (cached for the roofline) and show them beside the spec.")] = False,
    device: Annotated[int, typer.Option(min=0, help="GPU ordinal (for --measure).")] = 0,
) -> None:
    """Report the GPU, driver, CUDA, NVRTC, cuda-core, ncu and model credentials."""
    from .doctor import measure_peaks, run_checks

    table = Table(title="cudaopt doctor", title_justify="left")
    for column in ("check", "status", "value", "what to do"):
        table.add_column(column)
    checks = run_checks()
    for check in checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]missing[/]", check.value,
                      "" if check.ok else check.fix)
    console().print(table)
    essential = {"cuda-core", "NVRTC", "GPU"}
    if any(not c.ok for c in checks if c.name in essential):
        raise typer.Exit(EXIT_FAILED)
    if measure:
        rows, path = measure_peaks(device)
        peaks = Table(title="peaks: spec vs measured", title_justify="left",
                      caption="spec FP32/FP64: matrix-unit rates (the speed-of-light floor's bound); measured: "
                              "a device-to-device copy and FMA kernels, best of 10", caption_justify="left")
        for column in ("peak", "unit", "spec", "measured", "measured / spec"):
            peaks.add_column(column, justify="left" if column in ("peak", "unit") else "right")
        for row in rows:
            peaks.add_row(row.name, row.unit, f"{row.spec:,.1f}", f"{row.measured:,.1f}", f"{row.measured / row.spec:.0%}")
        console().print(peaks)
        console().print(f"cached in {path}", highlight=False, soft_wrap=True)


def main() -> None:
    """The console entry point. An unexpected error (a bug) never ends in a traceback: one line
    says what happened and names a log file holding the traceback; exit status 4."""
    try:
        app(prog_name="cudaopt")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted")
        sys.exit(130)
    except Exception as exc:
        log = crash_log(exc)
        text = " ".join(str(exc).split())[:300] or "(no message)"
        Console(stderr=True).print(f"[bold red]error:[/] unexpected {type(exc).__name__}: {escape(text)} "
                                   f"(a bug: the traceback is in {log})", highlight=False, soft_wrap=True)
        sys.exit(EXIT_INTERNAL)


def crash_log(exc: BaseException) -> Path:
    """Write the traceback of ``exc`` to a new file under the cache directory; its path."""
    import datetime as dt
    import traceback

    from .paths import cache_root

    folder = cache_root() / "crashes"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = folder / f"crash-{stamp}-{os.getpid()}.log"
    path.write_text(f"cudaopt {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc)))
    return path
