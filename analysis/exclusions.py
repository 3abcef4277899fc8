"""Which answers enter the metrics, and why the others do not.

Every removed row is kept in an exclusion log with its reason, so the report can say
exactly what was left out. Rules (Burgert et al. 2025, App. E.2; Wen et al. 2024, App.):

- a participant who fails more than ``max_attention_failures`` attention checks is
  excluded entirely (Burgert: "only if the attention test was correctly passed ...");
  people only: a model cannot follow an instruction, its attention trials are just unscored;
- a participant who answers more than ``max_catch_errors`` catch trials wrong (if set) is
  excluded entirely (catch trials have a known answer: DiST's mirrored-copy triplets, unchanged
  check photos in classification studies); people only; every person's catch performance is
  reported either way (:func:`catch_performance`);
- catch, attention and practice trials never enter accuracy (catch trials are reported
  on their own, :attr:`Cleaned.catch`);
- rows excluded at collection time (refresh-rate check, browser check) keep their reason;
- trials during which the page lost visibility or focus, or with more dropped frames than
  ``max_dropped_frames``, are excluded (browser/refresh failures);
- timeouts are excluded (``timeouts="exclude"``) or scored wrong (``"error"``);
- "not clear" is an error (Burgert's protocol) unless ``not_clear="exclude"``;
- pilot sessions (``observer_kind = "pilot"``: lab ``--simulate``, web sessions of ``serve codes --pilot`` codes)
  never count, unless ``include_pilots`` counts them as people;
- people excluded after collection (admin, browser check, attention check: the exclusion
  log of ``cuebench.exclusions``) arrive with ``excluded = 1`` and the decision as reason.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pandas as pd

from cuebench.errors import CuebenchError
from cuebench.trial_types import cards
from cuebench.trials import NOT_CLEAR

LOG_COLUMNS = ["observer", "observer_kind", "experiment", "trial_id", "role", "reason"]
PAGE_EVENTS = ("blur", "hidden", "visibilitychange", "fullscreen_exit", "fullscreenchange")


class ExclusionOptionError(CuebenchError, ValueError):
    """An exclusion option has a value outside its allowed set."""


@dataclass(frozen=True)
class ExclusionOptions:
    max_attention_failures: int = 0
    max_catch_errors: int | None = None
    timeouts: str = "exclude"
    not_clear: str = "error"
    max_dropped_frames: int | None = None
    page_events: bool = True
    include_pilots: bool = False

    def __post_init__(self):
        for name, allowed in (("timeouts", ("exclude", "error")), ("not_clear", ("exclude", "error"))):
            if getattr(self, name) not in allowed:
                raise ExclusionOptionError(f"exclusion option {name!r} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.max_attention_failures < 0:
            raise ExclusionOptionError(f"max_attention_failures must be >= 0, got {self.max_attention_failures}")
        if self.max_catch_errors is not None and self.max_catch_errors < 0:
            raise ExclusionOptionError(f"max_catch_errors must be >= 0, got {self.max_catch_errors}")

    def to_dict(self) -> dict:
        return asdict(self)

    def rules(self) -> list[str]:
        """The rules :func:`apply_exclusions` applies with these options, in its order, as a preregistration
        states them (``cuebench prereg``): one sentence each, every number the option's value."""
        catch = ("a person who answers more than {} catch trial(s) wrong (a timeout counts as wrong) is excluded "
                 "entirely".format(self.max_catch_errors) if self.max_catch_errors is not None else
                 "catch-trial performance is reported per person but excludes no one")
        return [
            "pilot sessions are counted as people" if self.include_pilots else
            "pilot sessions (pilot entry codes, simulated lab sessions) are never counted",
            f"a person who fails more than {self.max_attention_failures} attention check(s) is excluded entirely",
            catch,
            "people the experimenter excludes (with a logged reason, before unblinding to the results) are excluded "
            "entirely and listed with the reason",
            "trials during which the page lost focus or visibility or left fullscreen are excluded" if self.page_events
            else "trials are kept when the page lost focus or visibility",
            f"trials with more than {self.max_dropped_frames} dropped frame(s) are excluded"
            if self.max_dropped_frames is not None else "trials are kept whatever frames they dropped",
            "trials without an answer (timeouts) are excluded" if self.timeouts == "exclude" else
            "trials without an answer (timeouts) are scored wrong",
            "a 'not clear' answer is scored wrong" if self.not_clear == "error" else
            "trials answered 'not clear' are excluded",
            "practice and attention trials are never scored; catch trials never enter accuracy",
        ]


@dataclass
class Cleaned:
    """``scored``: test trials that count; ``catch``: catch trials of kept observers; ``log``: one row per excluded
    answer; ``segments``: kept test trials of a type not scored right or wrong (:func:`scored_otherwise`: a
    segment trial, by its stored confusion matrices)."""

    scored: pd.DataFrame
    catch: pd.DataFrame
    log: pd.DataFrame
    excluded_observers: pd.DataFrame
    segments: pd.DataFrame = field(default_factory=pd.DataFrame)

    def summary(self) -> pd.DataFrame:
        """Count of excluded rows per reason and observer kind."""
        if self.log.empty:
            return pd.DataFrame(columns=["reason", "observer_kind", "rows", "observers"])
        return (self.log.groupby(["reason", "observer_kind"], as_index=False)
                .agg(rows=("trial_id", "size"), observers=("observer", "nunique")))


def apply_exclusions(df: pd.DataFrame, options: ExclusionOptions | None = None) -> Cleaned:
    """Split responses into scored test trials, catch trials and a log of what was excluded and why."""
    options = options or ExclusionOptions()
    df = df.copy()
    kinds = df["observer_kind"].copy()  # the log names a pilot a pilot even when it is counted
    pilots = kinds == "pilot"
    if options.include_pilots:
        df.loc[pilots, "observer_kind"] = "human"
    reasons = pd.Series(pd.NA, index=df.index, dtype="string")

    def mark(mask, reason):
        mask = mask.fillna(False).astype(bool) & reasons.isna()
        reasons[mask] = reason if isinstance(reason, str) else reason[mask]

    if not options.include_pilots:
        mark(pilots, "pilot session (counted only with --include-pilots)")
    failed_observers = attention_failures(df, options.max_attention_failures)
    failed = df["observer"].isin(failed_observers.index)
    mark(failed, df["observer"].map(
        lambda o: f"participant failed {failed_observers.get(o, 0)} attention check(s) "
                  f"(allowed {options.max_attention_failures})"))
    if options.max_catch_errors is not None:
        catch_failed = catch_errors(df, options.max_catch_errors)
        mark(df["observer"].isin(catch_failed.index), df["observer"].map(
            lambda o: f"participant answered {catch_failed.get(o, 0)} catch trial(s) wrong "
                      f"(allowed {options.max_catch_errors})"))
    mark(df["excluded"] == 1, "excluded: " + df["exclusion_reason"].fillna("when collected"))
    if options.page_events:
        mark(df["events"].map(left_page), "left the page or window during the trial")
    if options.max_dropped_frames is not None:
        mark(df["dropped_frames"] > options.max_dropped_frames,
             f"more than {options.max_dropped_frames} dropped frame(s)")
    timed_out = (df["timed_out"] == 1) | ((df["response"] == "") & df["correct"].notna())
    if options.timeouts == "exclude":
        mark(timed_out, "timeout (no answer)")
    if options.not_clear == "exclude":
        mark(df["response"] == NOT_CLEAR, "answered 'not clear' (configured as excluded)")

    unscored_role = ~df["role"].isin(["test", "catch"])
    mark(unscored_role, "role '" + df["role"] + "' is never scored")
    otherwise = scored_otherwise(df)
    mark(df["correct"].isna() & (df["role"] == "test") & ~otherwise, "no correct answer to score against")

    keep = reasons.isna()
    segments = df[keep & (df["role"] == "test") & otherwise].reset_index(drop=True)
    scored = df[keep & (df["role"] == "test") & ~otherwise].copy()
    scored["correct"] = scored["correct"].astype(int)
    catch = df[keep & (df["role"] == "catch")].copy()
    log = (df.loc[~keep, LOG_COLUMNS[:-1]].assign(observer_kind=kinds[~keep], reason=reasons[~keep])
           .reset_index(drop=True))
    everything = df.groupby("observer")["trial_id"].size()
    left = pd.concat([scored, segments]).groupby("observer")["trial_id"].size().reindex(everything.index, fill_value=0)
    gone = left[left == 0].index
    excluded_observers = pd.DataFrame({
        "observer": list(gone),
        "reason": [_main_reason(log, o) for o in gone],
    })
    return Cleaned(scored=scored.reset_index(drop=True), catch=catch.reset_index(drop=True), log=log,
                   excluded_observers=excluded_observers, segments=segments)


def scored_otherwise(df: pd.DataFrame) -> pd.Series:
    """Which rows are of a trial type whose answers are not right or wrong (its card's ``right_or_wrong``: a
    segment trial's label map): they need no correct answer, and ``Cleaned.segments`` keeps them for the sections
    that read them (``Section.reads_segments``) instead of among the scored trials."""
    return df["trial_type"].isin([name for name, card in cards().items() if not card.right_or_wrong])


def attention_failures(df: pd.DataFrame, allowed: int) -> pd.Series:
    """Observers with more than ``allowed`` wrong attention-trial answers, and their count."""
    att = df[(df["role"] == "attention") & (df["observer_kind"] == "human")]
    wrong = att.assign(wrong=att["correct"].fillna(0) == 0).groupby("observer")["wrong"].sum()
    return wrong[wrong > allowed].astype(int)


def catch_errors(df: pd.DataFrame, allowed: int) -> pd.Series:
    """People with more than ``allowed`` catch trials answered wrong (a timeout counts as wrong), and their count."""
    catch = df[(df["role"] == "catch") & (df["observer_kind"] == "human")]
    wrong = catch.assign(wrong=catch["correct"].fillna(0) == 0).groupby("observer")["wrong"].sum()
    return wrong[wrong > allowed].astype(int)


def catch_performance(df: pd.DataFrame) -> pd.DataFrame:
    """Per observer with catch trials: how many, how many right, and the share right (a timeout is wrong), as
    answered, before any exclusion, so the report shows whom ``max_catch_errors`` would leave out."""
    catch = df[df["role"] == "catch"]
    columns = ["observer", "observer_kind", "catch_trials", "catch_correct", "catch_accuracy"]
    if catch.empty:
        return pd.DataFrame(columns=columns)
    out = (catch.assign(right=catch["correct"].fillna(0).astype(int))
           .groupby(["observer", "observer_kind"], as_index=False)
           .agg(catch_trials=("right", "size"), catch_correct=("right", "sum")))
    out["catch_accuracy"] = out["catch_correct"] / out["catch_trials"]
    return out[columns]


def left_page(events) -> bool:
    """True when a trial's event list records a blur, hidden page or fullscreen exit."""
    if events is None or events is pd.NA or (isinstance(events, float)) or events == "":
        return False
    try:
        items = json.loads(events) if isinstance(events, str) else events
    except json.JSONDecodeError:
        return False
    if isinstance(items, dict):
        items = [{"type": k} for k, v in items.items() if v]
    names = [(e.get("type") or e.get("event") or "") if isinstance(e, dict) else str(e) for e in items]
    return any(n in PAGE_EVENTS for n in names)


def _main_reason(log: pd.DataFrame, observer: str) -> str:
    reasons = log.loc[log["observer"] == observer, "reason"]
    return str(reasons.mode().iloc[0]) if len(reasons) else "no test trials"
