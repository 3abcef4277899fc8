"""The numbers the web task shares with Python come from Python: the checked-in ``static/task/constants.js`` is
what ``python -m human_tasks.web.constants`` writes today, and the task's modules import each of them."""

from __future__ import annotations

import re

from human_tasks.web import STATIC_DIR
from human_tasks.web.constants import MODULE, SHARED, javascript


def test_the_checked_in_module_is_current():
    assert MODULE.read_text(encoding="utf-8") == javascript(), \
        "human_tasks/web/static/task/constants.js is out of date: run `python -m human_tasks.web.constants`"


def test_the_module_exports_the_documented_values():
    """Each ``export const NAME = VALUE;``: a frame dropped beyond 1.2 periods, 1 s of practice feedback (as in
    the lab), a browser check failing beyond a fifth of irregular frames, viewing distances of 20-300 cm (docs/web.md,
    docs/lab.md)."""
    exported = dict(re.findall(r"^export const (\w+) = (.+);$", javascript(), flags=re.M))
    assert exported == {"DROPPED_FRAME_FACTOR": "1.2", "FEEDBACK_MS": "1000", "MAX_OUTLIER_SHARE": "0.2",
                        "VIEWING_DISTANCE_CM": "[20.0, 300.0]"}


def test_every_shared_number_is_imported_by_the_task_and_defined_nowhere_else_in_it():
    modules = {path.name: path.read_text(encoding="utf-8") for path in (STATIC_DIR / "task").glob("*.js")
               if path != MODULE}
    imported = {name for text in modules.values()
                for names in re.findall(r'import \{([^}]*)\} from "\./constants\.js"', text)
                for name in re.split(r"\s*,\s*", names.strip())}
    assert imported == set(SHARED)
    declared = {(file, name) for file, text in modules.items() for name in SHARED
                if re.search(rf"\b(const|let|var)\s+{name}\b", text)}
    assert declared == set()

