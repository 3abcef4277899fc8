"""``cuebench report`` (the HTML report and every number as CSV/JSON) and ``cuebench analyze`` (tables in the terminal)."""

from __future__ import annotations

import argparse

from cuebench.paths import user_path

from .sections import all_metrics, metric_table

MAIN_TABLES = ("exclusion_summary", "catch_per_person", "group_accuracy", "group_relative_accuracy", "shape_bias",
               "cue_decomposition", "oddity", "thresholds", "noise_ceilings", "ttests", "friedman_ranks")
SHAPE_BIAS_COLUMNS = ["observer", "shape_bias", "n_shape", "n_texture"]


def _analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-attention-failures", type=int, default=0,
                        help="a participant failing more attention checks than this is excluded entirely")
    parser.add_argument("--max-catch-errors", type=int, default=None, metavar="N",
                        help="a participant answering more catch trials wrong than this is excluded entirely "
                             "(default: no rule; every person's catch performance is reported either way)")
    parser.add_argument("--not-clear", choices=("error", "exclude"), default="error",
                        help="score a 'not clear' answer as an error (Burgert et al.) or leave it out")
    parser.add_argument("--timeouts", choices=("exclude", "error"), default="exclude",
                        help="leave trials without an answer out, or score them wrong")
    parser.add_argument("--max-dropped-frames", type=int, default=None,
                        help="exclude trials with more dropped frames than this (default: keep all)")
    parser.add_argument("--include-pilots", action="store_true",
                        help="count pilot sessions (lab --simulate, pilot=1 web links) as people")
    parser.add_argument("--n-choices", type=int, default=None,
                        help="answer choices C for chance correction (default: the experiment's label count, "
                             "else the number of categories)")
    parser.add_argument("--model-set", default=None,
                        help="comma-separated models whose mean Q_S, Q_T define s, t of S_cd (default: all models)")
    parser.add_argument("--pairing", choices=("item", "group"), default="item",
                        help="t-test pairing unit: per image x condition trial, or per participant group")
    parser.add_argument("--correction", default="holm", help="multiple-comparison correction (pingouin.multicomp)")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for CIs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstraps and split halves")


def register(sub) -> None:
    report = sub.add_parser(
        "report", help="HTML report with plots, tables and every number as CSV/JSON",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Analyse an experiment directory, a response file (CSV/Parquet/SQLite) or a folder of "
                    "model-vs-human raw CSVs and write report.html (self-contained), tables/*.csv, results.json "
                    "and provenance.json. A folder with a study.json is reported as a factor study.")
    report.add_argument("source", type=user_path, help="experiment directory, response file or folder of raw CSVs")
    report.add_argument("--compare", nargs="+", type=user_path, default=[], metavar="OTHER",
                        help="more sources whose observers are analysed alongside (e.g. another model's responses)")
    report.add_argument("--out", type=user_path, default=None,
                        help="output folder (default: the experiment's reports/, else ./report)")
    report.add_argument("--database", metavar="URL",
                        help="postgresql://USER@HOST/DB holding the experiment's responses "
                             "(default: its responses.sqlite)")
    report.add_argument("--reference", choices=("burgert2025", "none"), default="burgert2025",
                        help="published human values drawn as a labelled reference")
    _analysis_options(report)
    report.set_defaults(func=run_report)

    analyze = sub.add_parser(
        "analyze", help="print the main analysis tables, or one metric",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Quick look at responses in the terminal. --metric shape-bias prints "
                    "observer,shape_bias,n_shape,n_texture.")
    analyze.add_argument("sources", nargs="+", type=user_path, help="experiment directories, response files, raw CSV folders")
    analyze.add_argument("--metric", choices=all_metrics(), default=None,
                         help="print only this table (each report section offers its own, see cuebench list "
                              "report-sections)")
    analyze.add_argument("--correlate", nargs=2, metavar=("X", "Y"), default=None,
                         help="Spearman rank correlation of two per-observer metric columns over the models "
                              "(--model-set, default all; columns of --metric observers, e.g. S_cd shape_bias)")
    analyze.add_argument("--out", type=user_path, default=None, help="also write the table as CSV (needs --metric)")
    _analysis_options(analyze)
    analyze.set_defaults(func=run_analyze)
    _register_plan(sub)


def _register_plan(sub) -> None:
    plan = sub.add_parser(
        "plan", help="participants needed to detect a human-model difference, simulated from a pilot",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="From the pilot's per-person differences to a model, simulate how many people the paired "
                    "t-test needs to detect --effect (a difference in accuracy, e.g. 0.1) at --power, drawing "
                    "people from the pilot (--method resample) or from a normal model (--method normal); the "
                    "assumptions, the normal model's n and pingouin's analytic n are printed beside the answer.")
    plan.add_argument("source", type=user_path, help="pilot experiment directory or response file")
    plan.add_argument("--effect", type=float, required=True, help="human - model accuracy difference to detect")
    plan.add_argument("--power", type=float, default=0.8)
    plan.add_argument("--alpha", type=float, default=0.05)
    plan.add_argument("--model", default=None, help="model observer to compare with (default: the first)")
    plan.add_argument("--simulations", type=int, default=4000, help="simulated studies per sample size")
    plan.add_argument("--method", choices=("resample", "normal"), default="resample",
                      help="resample: draw people from the pilot's per-person differences (shifted to --effect); "
                           "normal: normal differences with the pilot's sd (pingouin's model; printed as the "
                           "cross-check either way)")
    _analysis_options(plan)
    plan.set_defaults(func=run_plan)


def run_plan(args) -> int:
    from .plan import plan
    from .report import analyze, load_for_report

    scored = analyze(load_for_report([args.source]), options_from(args), only={"accuracy"}).cleaned.scored
    result = plan(scored, args.effect, args.power, args.alpha, args.model, sims=args.simulations, seed=args.seed,
                  method=args.method)
    print("\n".join(result.lines()))
    return 0


def options_from(args):
    from .exclusions import ExclusionOptions
    from .report import AnalysisOptions

    return AnalysisOptions(
        exclusions=ExclusionOptions(max_attention_failures=args.max_attention_failures,
                                    max_catch_errors=args.max_catch_errors, timeouts=args.timeouts,
                                    not_clear=args.not_clear, max_dropped_frames=args.max_dropped_frames,
                                    include_pilots=args.include_pilots),
        n_choices=args.n_choices, model_set=args.model_set.split(",") if args.model_set else None,
        pairing=args.pairing, correction=args.correction, n_boot=args.n_boot, seed=args.seed)


def run_report(args) -> int:
    from .report import write_report

    path = write_report([args.source], args.out, compare=args.compare or None,
                        reference=None if args.reference == "none" else args.reference, options=options_from(args),
                        database=args.database)
    print(f"report: {path}")
    return 0


def run_analyze(args) -> int:
    from dataclasses import replace

    import pandas as pd

    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import atomic_write

    from .comparison import rank_correlation
    from .report import ReportError, analyze, load_for_report, n_choices_of

    if args.out and not (args.metric or args.correlate):
        raise ReportError("--out writes one table: give --metric NAME (or --correlate X Y)")
    options = options_from(args)
    df = load_for_report(args.sources)
    if options.n_choices is None:
        options = replace(options, n_choices=n_choices_of(args.sources, df))
    only = {"observers"} if args.correlate else ({metric_table(args.metric)[0]} if args.metric else None)
    result = analyze(df, options, only=only)
    if args.correlate:
        summary = result.tables["observer_summary"]
        models = summary[summary["observer_kind"] == "model"]
        table = pd.DataFrame([rank_correlation(models, *args.correlate, observers=options.model_set)])
    elif args.metric:
        section, name, needs = metric_table(args.metric)
        if name not in result.tables:
            why = f"; {result.missing[section]}" if section in result.missing else ""
            raise ReportError(f"metric {args.metric!r} needs {needs}; these responses have none{why}")
        table = result.tables[name]
        if args.metric == "shape-bias":
            table = table[SHAPE_BIAS_COLUMNS]
    else:
        with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 3):
            for name in MAIN_TABLES:
                if name in result.tables and len(result.tables[name]):
                    print(f"\n== {name}\n{result.tables[name].to_string(index=False)}")
            for note in result.notes:
                print(f"note: {note}")
        return 0
    with pd.option_context("display.width", 160, "display.max_columns", 30, "display.precision", 3):
        print(table.to_string(index=False))
    if args.out:
        atomic_write(args.out, frame_csv(table))
        print(f"written: {args.out}")
    return 0
