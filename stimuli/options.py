"""Typed build options: the options every design shares, and the base of each design's own.

A design declares its options as a pydantic model (name, type, default, help, constraints,
refused combinations); the ``cuebench stimuli build`` command line is generated from these
models, library calls take them directly, and an experiment's provenance records exactly the
design's own options and the common ones, so adding an option to one design leaves every
other design's ``experiment.json`` unchanged.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cuebench.errors import CuebenchError, describe
from cuebench.trials import Timing
from cuebench.words import LANGUAGE, check_language, languages


class OptionError(CuebenchError):
    """A build option has a bad value, or options that cannot combine were given together."""


PARSING = {"int_parsing": "a whole number", "float_parsing": "a number", "bool_parsing": "true or false"}
"""What a command-line string failed to be, in words."""


class Options(BaseModel):
    """Base of every options model: unknown options refused, values immutable, help from ``description``.

    Every constraint lives in the model (``Field(ge=...)``, validators for refused combinations), so the
    Python API and the command line refuse the same values, before any work: the first problem is a
    one-line ``OptionError`` naming the option as it is spelled on the command line (strings from the
    command line are converted first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            first = err.errors()[0]
            loc = first["loc"]
            path, problem = describe(first)
            if first["type"] in PARSING:
                problem = f"expected {PARSING[first['type']]}, got {first['input']!r}"
            raise OptionError(f"{flag(str(loc[0])) if loc else path}: {problem}") from None


class DesignOptions(Options):
    """The options of one design; a design without options of its own uses this as it is."""


TIMING_KEYS = {"fixation": "fixation", "stimulus": "stimulus", "mask": "mask", "iti": "iti",
               "response": "response_window"}


def parse_timing(spec: str, base: Timing) -> Timing:
    """``fixation=300,stimulus=200,mask=200,iti=500,response=none`` over a design's standard timing:
    milliseconds per phase, ``none`` to skip a phase (``response=none``: no response deadline)."""
    changes: dict[str, int | None] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in TIMING_KEYS:
            raise OptionError(f"--timing {spec!r}: {part!r} is not PHASE=MS with PHASE one of "
                              f"{', '.join(TIMING_KEYS)}")
        value = value.strip().lower()
        try:
            changes[TIMING_KEYS[key.strip()]] = None if value == "none" else int(value)
        except ValueError:
            raise OptionError(f"--timing {spec!r}: {key.strip()}={value!r} must be whole milliseconds or none") \
                from None
    try:
        return Timing(**{**base.to_dict(), **changes})
    except CuebenchError as err:
        raise OptionError(f"--timing {spec!r}: {err}") from None


STUDY_OPTIONS = ("practice", "catch_every", "attention", "check_images", "timing", "only", "label_names")
"""Common options that shape the trials; each design says which of them it honours."""


class BuildOptions(Options):
    """Options every design takes: where the images come from, the seed, what to do with a bad image,
    and how the study runs (practice, catch and attention trials, timing, stimulus size)."""

    images: str = Field("default", description="'default' (bundled public-domain photos), a folder with one "
                        "sub-folder per class, a flat folder with --labels, or the folder a design imports")
    labels: str | None = Field(None, description="labels CSV (columns image,category) for a flat folder")
    only: str | None = Field(None, description="CSV with a source_image column (e.g. from cuebench curate): build "
                                               "from these images only")
    name: str | None = Field(None, description="experiment name (default: the folder's name)")
    seed: int = Field(0, description="seed for every random choice")
    on_error: Literal["skip", "fail"] = Field(
        "fail", description="what to do with a corrupt, unreadable or oversized source image: leave it out "
                            "(listed at the end) or stop")
    workers: int | None = Field(None, ge=1, description="processes (default: all cores)")
    practice: int = Field(0, ge=0, description="practice trials with feedback, on check photos (--check-images)")
    catch_every: int | None = Field(None, ge=0, description="one catch trial (an unchanged check photo, known "
                                                            "answer) after every K test trials; 0: none")
    attention: int | None = Field(None, ge=0, description="one attention check (on a check photo) after every N "
                                                          "test trials (design default; 0: none)")
    check_images: str | None = Field(None, description="folder with one sub-folder per class: the photos practice, "
                                                       "catch and attention trials show, never the study's own "
                                                       "(default: the bundled cat and clock photos)")
    timing: str | None = Field(None, description="phase durations in ms over the design's standard timing, e.g. "
                                                 "fixation=300,stimulus=200,mask=200,iti=500,response=none")
    stimulus_degrees: float | None = Field(None, gt=0, description="stimulus width in degrees of visual angle "
                                                                    "(with --viewing-distance and --screen-width)")
    viewing_distance: float | None = Field(None, gt=0, description="eye-to-screen distance in cm (lab)")
    screen_width: float | None = Field(None, gt=0, description="visible screen width in cm (lab)")
    language: str = Field(LANGUAGE, description=f"the language participants read ({', '.join(languages())}): the "
                                               "task's words and the default texts, written to texts/LANG/")
    label_names: str | None = Field(None, description="CSV label,en,de,...: each class's name on the answer "
                                                      "buttons per language (docs/labelled_sets.md); its en column "
                                                      "maps classes named in another language to ImageNet's")

    @field_validator("language")
    @classmethod
    def _language_known(cls, language: str) -> str:
        return check_language(language)

    @field_validator("timing")
    @classmethod
    def _timing_parses(cls, spec: str | None) -> str | None:
        if spec is not None:
            parse_timing(spec, Timing())
        return spec

    def model_post_init(self, context: Any) -> None:
        geometry = {"stimulus_degrees": self.stimulus_degrees, "viewing_distance": self.viewing_distance,
                    "screen_width": self.screen_width}
        given = [k for k, v in geometry.items() if v is not None]
        if given and len(given) != 3:
            missing = ", ".join(flag(k) for k in geometry if k not in given)
            raise OptionError(f"{', '.join(flag(k) for k in given)} needs {missing} as well: the stimulus size "
                              "in degrees is set by all three")
        if self.labels is not None and self.images == "default":
            raise OptionError("--labels names the classes of a flat folder given with --images; the default "
                              "photos have their own")

    def recorded(self) -> dict[str, Any]:
        """The options provenance keeps: the source, seed and error policy always; the study options when set
        (so a build without them writes what it always wrote); not how many processes made it."""
        always = {"images", "labels", "name", "seed", "on_error"}
        return {k: v for k, v in self.model_dump(mode="json").items()
                if k in always or (k != "workers" and v is not None and k in self.model_fields_set)}


def flag(name: str) -> str:
    """``eed_steps`` -> ``--eed-steps``."""
    return "--" + name.replace("_", "-")


def _plain_type(annotation: Any) -> Any:
    """The type without ``None`` (``int | None`` -> ``int``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return annotation


def add_option_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, model: type[Options], *,
                         skip: set[str] = frozenset(), hidden: bool = False) -> None:
    """One command-line option per field of ``model``: booleans are flags, lists repeat, ``Literal`` fields
    get their choices; values stay strings (pydantic converts and checks them). Options not given are left
    out of the namespace, so a design's defaults come from its model alone."""
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        kind = _plain_type(info.annotation)
        text = argparse.SUPPRESS if hidden else _help(info)
        common = {"dest": name, "default": argparse.SUPPRESS, "help": text}
        if kind is bool:
            parser.add_argument(flag(name), action="store_true", **common)
        elif typing.get_origin(kind) is list:
            parser.add_argument(flag(name), action="append", metavar="VALUE", **common)
        elif typing.get_origin(kind) is Literal:
            parser.add_argument(flag(name), choices=typing.get_args(kind), **common)
        else:
            parser.add_argument(flag(name), metavar=name.upper(), **common)


BOUND_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _help(info) -> str:
    """The description, then the default and the bounds the model declares (``Field(ge=1)``: ``>= 1``)."""
    default = info.get_default(call_default_factory=True)
    notes = [] if default in (None, False, []) else [f"default: {default}"]
    notes += [f"{sign} {getattr(m, key)}" for m in info.metadata for key, sign in BOUND_SIGNS.items()
              if getattr(m, key, None) is not None]
    return (info.description or "") + (f" ({'; '.join(notes)})" if notes else "")
