"""``cuebench report`` (the HTML report and every number as CSV/JSON) and ``cuebench analyze`` (tables in the terminal)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cuebench.commands import add_command
from cuebench.paths import user_path

from .sections import all_metrics, metric_columns, metric_table, ordered, per_observer_sections, summary_tables

EXCLUSION_TABLES = ("exclusion_summary", "catch_per_person")
"""What ``cuebench analyze`` prints first, before each section's ``summary_tables``: who and what was excluded."""


class MetricNames:
    """``--metric``'s choices, read from the report sections only when argparse checks a value or prints
    help: loading every section imports SciPy, pingouin and matplotlib, about two seconds that every
    other ``cuebench`` command would otherwise pay at start-up."""

    def __contains__(self, name) -> bool:
        return name in all_metrics()

    def __iter__(self):
        return iter(all_metrics())


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
                        help="count pilot sessions (lab --simulate, web sessions of `serve codes --pilot` codes) as people")
    parser.add_argument("--n-choices", type=int, default=None,
                        help="answer choices C for chance correction (default: the card of the experiment's trial "
                             "type, e.g. its label count or 2 for a same/different card; else the number of categories)")
    parser.add_argument("--model-set", default=None,
                        help="comma-separated models whose mean Q_S, Q_T define s, t of S_cd (default: all models)")
    parser.add_argument("--pairing", choices=("item", "group"), default="item",
                        help="t-test pairing unit: per image x condition trial, or per participant group")
    parser.add_argument("--correction", default="holm", help="multiple-comparison correction (pingouin.multicomp)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the corrected t-tests")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for CIs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstraps and split halves")


def register(sub, recruitment_target=None) -> None:
    """``recruitment_target(expdir)``: the study's stored recruitment target, read by the server's rules (handed in
    by the command, as the analysis cannot import the server)."""
    report = add_command(
        sub, "report", help="HTML report with plots, tables and every number as CSV/JSON",
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

    analyze = add_command(
        sub, "analyze", help="print the main analysis tables, or one metric",
        description="Quick look at responses in the terminal. --metric shape-bias prints "
                    "observer,shape_bias,n_shape,n_texture.")
    analyze.add_argument("sources", nargs="+", type=user_path, help="experiment directories, response files, raw CSV folders")
    analyze.add_argument("--metric", choices=MetricNames(), default=None, metavar="METRIC",
                         help="print only this table: %(choices)s (each report section offers its own, see "
                              "cuebench list report-sections)")
    analyze.add_argument("--correlate", nargs=2, metavar=("X", "Y"), default=None,
                         help="Spearman rank correlation of two per-observer metric columns over the models "
                              "(--model-set, default all; columns of --metric observers, e.g. S_cd shape_bias, or of "
                              "--metric segmentation-summary, e.g. S_cd_Vor32 robustness_Mean)")
    analyze.add_argument("--out", type=user_path, default=None, help="also write the table as CSV (needs --metric)")
    _analysis_options(analyze)
    analyze.set_defaults(func=run_analyze)
    _register_plan(sub)
    _register_prereg(sub, recruitment_target)
    _register_domain(sub)
    _register_selection(sub)
    _register_curate(sub)
    _register_multilabel(sub)


def _register_multilabel(sub) -> None:
    multilabel = sub.add_parser(
        "multilabel", help="mean average precision of a multi-label set's answers, with its chance level and "
                           "reliance (Burgert et al. Sec. 5.2)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Per model, condition and level: mAP over the labels the images carry (scikit-learn's AP), "
                    "the exact expected mAP of random answers as chance, and each suppressed cell on the chance-0 / "
                    "original-1 scale (analysis.multilabel).")
    multilabel.add_argument("source", type=user_path, help="experiment directory a model answered")
    multilabel.add_argument("--out", type=user_path, default=Path("multilabel"), help="output folder")
    multilabel.set_defaults(func=run_multilabel)


def run_multilabel(args) -> int:
    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import ExperimentDir, atomic_write

    from .load import load_responses
    from .metrics import BASELINE
    from .multilabel import map_reliance, map_table

    labels = ExperimentDir(args.source).load().label_set.labels
    table = map_table(load_responses(args.source), labels)
    outputs = {"map.csv": table}
    if (table["condition"] == BASELINE).any() and (table["condition"] != BASELINE).any():
        outputs["map_reliance.csv"] = map_reliance(table)
    for name, frame in outputs.items():
        atomic_write(args.out / name, frame_csv(frame))
        print(f"wrote {args.out / name}")
    print(table.to_string(index=False))
    return 0


def _register_domain(sub) -> None:
    domain = add_command(
        sub, "domain-report", help="reliance curves averaged over the data sets of a domain (Burgert et al. Exp. II)",
        description="One suppression experiment per data set of a domain, each answered by the models trained on "
                    "it: chance-corrected relative accuracy with each set's own C, runs averaged per set, then the "
                    "sets averaged per model architecture, with the sd over sets; runs and sets whose originals are "
                    "at or below chance have no value and are counted and named as left out (analysis.domains).")
    domain.add_argument("sources", nargs="+", type=user_path, help="the domain's experiment directories")
    domain.add_argument("--out", type=user_path, default=Path("domain-report"), help="output folder")
    domain.set_defaults(func=run_domain)


def run_domain(args) -> int:
    from .domains import write_domain_report

    written, notes = write_domain_report(args.sources, args.out)
    for path in written:
        print(f"wrote {path}")
    for note in notes:
        print(f"note: left out of the mean: {note}")
    return 0


def _register_selection(sub) -> None:
    selection = add_command(
        sub, "selection", help="BiasBed model selection (best-val, last-N, oracle), variability and rank tests of a "
                               "per-epoch training log",
        description="From a per-epoch log (algorithm, run, epoch, split, accuracy; split 'val' selects): the score "
                    "of each run per test set by each selection, mean and sd over runs (CSV and LaTeX), intra- and "
                    "inter-run variability with a figure, and the Friedman/Nemenyi test with the data sets as "
                    "blocks, over all test sets and over a strict subset (analysis.selection).")
    selection.add_argument("log", type=user_path, help="training log CSV (training.csv, cue_training.csv, ...)")
    selection.add_argument("--select", action="append", default=None, metavar="METHOD",
                           help="best-val, last-N or oracle, repeatable (default: best-val, last-5, oracle)")
    selection.add_argument("--last", type=int, default=5, help="epochs of the intra-run variability")
    selection.add_argument("--rank-by", default="best-val", help="the selection the rank tests use (not oracle)")
    selection.add_argument("--strict-exclude", default="", metavar="SETS",
                           help="comma-separated test sets the strict rank test leaves out (made as some algorithm "
                                "trains)")
    selection.add_argument("--out", type=user_path, default=Path("selection"), help="output folder")
    selection.set_defaults(func=run_selection)


def run_selection(args) -> int:
    import json

    import pandas as pd

    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import atomic_write

    from .figure_style import save
    from .selection import latex_table, rank_tests, selection_table, variability, variability_figure

    log = pd.read_csv(args.log)
    methods = args.select or ["best-val", "last-5", "oracle"]
    table = selection_table(log, methods)
    outputs = {"selection.csv": frame_csv(table), "selection.tex": latex_table(table).encode("utf-8"),
               "variability.csv": frame_csv(variability(log, args.last, args.rank_by))}
    strict = tuple(s.strip() for s in args.strict_exclude.split(",") if s.strip())
    if log[log["split"] != "val"]["split"].nunique() >= 2 and log["algorithm"].nunique() >= 2:
        for name, result in rank_tests(table, args.rank_by, strict).items():
            outputs[f"rank_tests_{name}.json"] = json.dumps(
                {**result.summary(), "average_ranks": result.average_ranks.to_dict(),
                 "nemenyi_p": result.nemenyi_p.to_dict()}, indent=1, default=float).encode("utf-8")
    for name, data in outputs.items():
        atomic_write(args.out / name, data)
        print(f"wrote {args.out / name}")
    save(variability_figure(log), args.out / "variability")
    print(f"wrote {args.out / 'variability.png'}")
    print(table.to_string(index=False))
    return 0


def _register_prereg(sub, recruitment_target=None) -> None:
    prereg = add_command(
        sub, "prereg", help="a preregistration written from the study, its exclusion rules and (with a pilot) its plan",
        description="Writes the sections of the OSF Preregistration template (or AsPredicted's nine questions) from "
                    "experiment.json, the analysis options given (the same as cuebench analyze takes), and, with "
                    "--pilot, the N of cuebench plan and the tests the report runs (analysis.prereg).")
    prereg.add_argument("expdir", type=user_path, help="the study's experiment directory")
    prereg.add_argument("--pilot", type=user_path, default=None, help="a pilot's experiment directory or responses")
    prereg.add_argument("--effect", type=float, default=None,
                        help="with --pilot: the human - model accuracy difference to detect (as cuebench plan)")
    prereg.add_argument("--power", type=float, default=0.8)
    prereg.add_argument("--simulations", type=int, default=1000, help="simulated studies per sample size (plan)")
    prereg.add_argument("--max-n", type=int, default=500, help="largest number of people searched (plan)")
    prereg.add_argument("--format", choices=("osf", "aspredicted"), default="osf",
                        help="osf: the OSF Preregistration template's sections; aspredicted: its nine questions")
    prereg.add_argument("--out", type=user_path, default=Path("prereg.md"))
    _analysis_options(prereg)
    prereg.set_defaults(func=run_prereg, recruitment_target=recruitment_target)


def run_prereg(args) -> int:
    from cuebench.expdir import atomic_write

    from .load import load_responses
    from .prereg import PreregError, aspredicted, planned_sample, preregistration, target_sample
    from .report import analyze_sources
    from .sections.methods import section_sentences

    options = options_from(args)
    sample, tests, models = None, None, set()
    if args.pilot is not None:
        if args.effect is None:
            raise PreregError("--pilot needs --effect: the human - model accuracy difference the study should detect")
        pilot = analyze_sources([args.pilot], options)[0]
        sample = planned_sample(pilot.cleaned.scored, args.pilot, options, args.effect, args.power, args.simulations,
                                args.max_n)
        tests = section_sentences(pilot)
        models |= set(pilot.cleaned.scored.query("observer_kind == 'model'")["observer"])
    if (args.expdir / "responses.sqlite").is_file():
        answered = load_responses(args.expdir)
        models |= set(answered.loc[answered["observer_kind"] == "model", "observer"])
    target = args.recruitment_target(args.expdir) if args.recruitment_target else None
    if sample is None and target:
        sample = target_sample(target)
    prereg = preregistration(args.expdir, options, sample, sorted(models), tests)
    text = aspredicted(prereg) if args.format == "aspredicted" else prereg.markdown()
    atomic_write(args.out, text.encode("utf-8"))
    print(f"wrote {args.out}")
    return 0


def _register_curate(sub) -> None:
    curate = add_command(
        sub, "curate", help="the images per class a model is most confident on (Burgert et al. 2025, Sec. 5.1), as "
                            "a list for 'cuebench stimuli build --only'",
        description="From a model's stored answers to the unsuppressed images (condition 'original', or a labelled "
                    "set's one condition) of a labelled-set or suppression experiment: per class the --per-class images with the model's highest score for "
                    "their true class, each flagged whether the model answered it correctly (analysis.curation).")
    curate.add_argument("source", type=user_path, help="experiment directory the model answered")
    curate.add_argument("--model", required=True, help="the observer id of the model (as cuebench eval stored it)")
    curate.add_argument("--per-class", type=int, default=50)
    curate.add_argument("--condition", default=None,
                        help="the unsuppressed condition to score (default: 'original', or a labelled set's only one)")
    curate.add_argument("--only-correct", action="store_true",
                        help="keep only images the model answered correctly (default: keep and flag them)")
    curate.add_argument("--out", type=user_path, default=Path("curated.csv"), help="the list (CSV)")
    curate.set_defaults(func=run_curate)


def run_curate(args) -> int:
    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import atomic_write

    from .curation import model_answers, most_confident, short_classes, unsuppressed_condition
    from .load import load_responses

    answers = model_answers(load_responses(args.source), args.model)
    condition = unsuppressed_condition(answers, args.condition)
    table = most_confident(answers, condition, args.per_class, only_correct=args.only_correct)
    atomic_write(args.out, frame_csv(table))
    print(f"wrote {args.out}: {len(table)} images of {table['category'].nunique()} classes, scored on condition "
          f"{condition!r}")
    wrong = table[~table["correct"]]
    if len(wrong):
        print(f"warning: {len(wrong)} listed image(s) the model answered wrongly (correct = False): "
              f"{', '.join(wrong['source_image'].astype(str))}")
    classes = answers.loc[answers["condition"] == condition, "category"]
    for category, n in short_classes(table, args.per_class, classes.dropna().astype(str)).items():
        print(f"warning: class {category!r} has {n} image(s), fewer than --per-class {args.per_class}")
    return 0


def _register_plan(sub) -> None:
    plan = add_command(
        sub, "plan", help="participants needed for the report's human-model t-tests, simulated from a pilot",
        description="Simulate the test the report runs (per model, condition and level, paired by item, Holm-"
                    "corrected over all of them) for studies of N people, from how much the pilot's items and "
                    "people differ, and print the smallest N whose expected power reaches --power for --effect "
                    "(a human - model difference in accuracy), the range of plausible N and the assumptions.")
    plan.add_argument("source", type=user_path, help="pilot experiment directory or response file")
    plan.add_argument("--effect", type=float, required=True, help="human - model accuracy difference to detect")
    plan.add_argument("--power", type=float, default=0.8)
    plan.add_argument("--model", default=None, help="plan this model's tests only (default: every model's)")
    plan.add_argument("--condition", default=None, help="plan this condition's test(s) only (default: the family)")
    plan.add_argument("--level", type=int, default=None, help="plan this level's test only (-1: no level)")
    plan.add_argument("--simulations", type=int, default=1000, help="simulated studies per sample size")
    plan.add_argument("--max-n", type=int, default=500, help="largest number of people searched")
    _analysis_options(plan)
    plan.set_defaults(func=run_plan)


def run_plan(args) -> int:
    from .plan import PlanError, plan
    from .report import analyze_sources

    if args.pairing != "item":
        raise PlanError("cuebench plan simulates the item-paired t-test (the report's default); --pairing group "
                        "is not planned")
    scored = analyze_sources([args.source], options_from(args), only={"accuracy"})[0].cleaned.scored
    result = plan(scored, args.effect, args.power, args.alpha, args.model, args.condition, args.level,
                  sims=args.simulations, max_n=args.max_n, seed=args.seed)
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
        pairing=args.pairing, correction=args.correction, alpha=args.alpha, n_boot=args.n_boot, seed=args.seed)


def run_report(args) -> int:
    """Every file of the report is made 0600 (``private_files``): its tables hold each participant's
    results, like the database and ``cuebench export``'s files."""
    from cuebench.expdir import private_files

    from .report import write_report

    with private_files():
        path = write_report([args.source], args.out, compare=args.compare or None,
                            reference=None if args.reference == "none" else args.reference,
                            options=options_from(args), database=args.database)
    print(f"report: {path}")
    return 0


def run_analyze(args) -> int:
    import pandas as pd

    from cuebench.csvsafe import frame_csv
    from cuebench.expdir import atomic_write, private_files

    from .comparison import rank_correlation
    from .report import ReportError, analyze_sources

    if args.out and not (args.metric or args.correlate):
        raise ReportError("--out writes one table: give --metric NAME (or --correlate X Y)")
    only = per_observer_sections() if args.correlate else ({metric_table(args.metric)[0]} if args.metric
                                                            else None)
    result, options = analyze_sources(args.sources, options_from(args), only=only)
    if args.correlate:
        summary = next((result.tables[s.per_observer] for s in ordered(result.sections)
                        if s.per_observer in result.tables), None)
        if summary is None:
            raise ReportError("--correlate needs per-observer metrics; these responses have none")
        models = summary[summary["observer_kind"] == "model"]
        table = pd.DataFrame([rank_correlation(models, *args.correlate, observers=options.model_set)])
    elif args.metric:
        section, name, needs = metric_table(args.metric)
        if name not in result.tables:
            why = f"; {result.missing[section]}" if section in result.missing else ""
            raise ReportError(f"metric {args.metric!r} needs {needs}; these responses have none{why}")
        columns = metric_columns(args.metric)
        table = result.tables[name] if columns is None else result.tables[name][list(columns)]
    else:
        with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 3):
            for name in (*EXCLUSION_TABLES, *summary_tables(result.sections)):
                if name in result.tables and len(result.tables[name]):
                    print(f"\n== {name}\n{result.tables[name].to_string(index=False)}")
            for note in result.notes:
                print(f"note: {note}")
        return 0
    with pd.option_context("display.width", 160, "display.max_columns", 30, "display.precision", 3):
        print(table.to_string(index=False))
    if args.out:
        with private_files():  # participants' results, 0600 like the report's files
            atomic_write(args.out, frame_csv(table))
        print(f"written: {args.out}")
    return 0
