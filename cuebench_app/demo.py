"""``cuebench demo``: the whole pipeline on the embedded default photos, offline.

Builds the feature-suppression experiment (Burgert et al. 2025) from the bundled
public-domain photos, prints the suppression-quality table, lets the three offline
EfficientNet-Lite models answer every trial, and writes the HTML report, where the
published human values of Burgert et al. (Table 3) stand in, clearly labelled, for the
people who have not taken part yet. ``--serve`` then serves the same experiment so you
can take part yourself, with a pilot code it prints (``serve --pilot-only``: the default consent's fields
for the researcher are not filled in).
"""

from __future__ import annotations

import argparse
from functools import partial

from cuebench.paths import user_path

DEMO_MODELS = ("tf_efficientnet_lite0", "tf_efficientnet_lite1", "tf_efficientnet_lite2")


def register(sub, *, run_command) -> None:
    """``run_command(argv) -> exit status`` is the ``cuebench`` command itself (handed in by it): the demo is
    a sequence of its subcommands."""
    demo = sub.add_parser("demo", help="build, evaluate and report the feature-suppression demo, offline",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--out", type=user_path, default="demo-output", help="experiment directory to write")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--models", default=",".join(DEMO_MODELS), help="comma-separated model specs to evaluate")
    demo.add_argument("--device", default="auto", help="auto, cpu or cuda")
    demo.add_argument("--serve", action="store_true", help="afterwards serve the experiment on 127.0.0.1")
    demo.add_argument("--port", type=int, default=8000)
    demo.set_defaults(func=partial(run_demo, run_command=run_command))


def run_demo(args, run_command) -> int:
    out = args.out
    print(f"== 1/4 building the feature-suppression experiment in {out}")
    code = run_command(["stimuli", "build", "--design", "suppression", "--images", "default", "--out", str(out),
                        "--seed", str(args.seed)])
    if code:
        return code

    print("\n== 2/4 suppression quality (Burgert et al. 2025, Table 2 layout) on the default photos")
    code = run_command(["stimuli", "metrics", "--images", "default", "--out",
                        str(out / "reports" / "quality_metrics.csv")])
    if code:
        return code

    print("\n== 3/4 models answer every trial")
    eval_args = ["eval", "--experiment", str(out), "--device", args.device]
    for spec in [m for m in args.models.split(",") if m]:
        eval_args += ["--model", spec]
    code = run_command(eval_args)
    if code:
        return code

    print("\n== 4/4 report")
    code = run_command(["report", str(out), "--out", str(out / "reports"), "--reference", "burgert2025"])
    if code:
        return code
    if args.serve:  # as a pilot: its consent's researcher, purpose and approval fields are still to fill in
        print(f"\nTake part with this pilot code: http://127.0.0.1:{args.port}/?code=CODE")
        code = run_command(["serve", "codes", str(out), "-n", "1", "--pilot"])
        return code or run_command(["serve", str(out), "--host", "127.0.0.1", "--port", str(args.port), "--pilot-only"])
    return 0
